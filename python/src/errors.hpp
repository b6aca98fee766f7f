#pragma once
/// The Python exceptions of kvconnect and how a kvc::status becomes one: every error carries the
/// status text and its code's name (`code`). errc::invalid_argument is an InvalidArgument (a
/// ValueError), a config's problems a ConfigError (an InvalidArgument naming the keys),
/// errc::timeout a Timeout (a TimeoutError), every other code an Error. Python types that do not
/// fit raise TypeError (pybind11's own, or type_error here).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include "proto/status.hpp"

namespace kvc::python {

/// Creates the exception classes in module `m` (once, at import).
void register_errors(pybind11::module_& m);

/// Raises the exception for `st` (which must be an error).
[[noreturn]] void raise(const status& st);

/// Raises ConfigError for the (key path, message) problems; the message lists them all.
[[noreturn]] void raise_config(std::vector<std::pair<std::string, std::string>> problems);

/// Raises TypeError with `message`.
[[noreturn]] void type_error(const std::string& message);

/// Raises TypeError "`what` must be `expected`, got <got's type>".
[[noreturn]] void wrong_type(const char* what, const char* expected, PyObject* got);

/// The UTF-8 text of the str `s`, valid while `s` lives; TypeError naming `what` for another type.
std::string_view text_of(pybind11::handle s, const char* what);

/// The value of `r`, or raise(r.error()).
template <class T>
T take(result<T>&& r) {
  if (!r) raise(r.error());
  return std::move(r).value();
}

/// Nothing when `st` is ok, else raise(st).
inline void check(const status& st) {
  if (!st) raise(st);
}

}  // namespace kvc::python
