#include "python/src/errors.hpp"

namespace kvc::python {
namespace py = pybind11;

namespace {

struct exception_types {
  py::object error;
  py::object invalid_argument;
  py::object config_error;
  py::object timeout;
};

exception_types& types() {
  static exception_types* t = new exception_types();  // lives as long as the interpreter
  return *t;
}

py::object new_type(py::module_& m, const char* name, const char* doc, py::tuple bases) {
  const std::string qualified = std::string("kvconnect.") + name;
  PyObject* t = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (t == nullptr) throw py::error_already_set();
  py::object type = py::reinterpret_steal<py::object>(t);
  m.attr(name) = type;
  return type;
}

[[noreturn]] void raise_with(const py::object& type, const std::string& message,
                             std::string_view code) {
  py::object e = type(message);
  e.attr("code") = py::str(code.data(), code.size());
  PyErr_SetObject(type.ptr(), e.ptr());
  throw py::error_already_set();
}

}  // namespace

void register_errors(py::module_& m) {
  auto& t = types();
  t.error = new_type(m, "Error", "A kvconnect error; `code` names its kind (errc).",
                     py::make_tuple(py::reinterpret_borrow<py::object>(PyExc_Exception)));
  t.invalid_argument =
      new_type(m, "InvalidArgument", "Malformed input (errc invalid_argument).",
               py::make_tuple(t.error, py::reinterpret_borrow<py::object>(PyExc_ValueError)));
  t.config_error = new_type(m, "ConfigError",
                            "A config kvconnect refuses; `errors` lists (key path, message), "
                            "`key` is the first key path.",
                            py::make_tuple(t.invalid_argument));
  t.timeout =
      new_type(m, "Timeout", "A deadline passed (errc timeout).",
               py::make_tuple(t.error, py::reinterpret_borrow<py::object>(PyExc_TimeoutError)));
}

void raise(const status& st) {
  const auto& t = types();
  const py::object& type = st.code() == errc::invalid_argument ? t.invalid_argument
                           : st.code() == errc::timeout        ? t.timeout
                                                               : t.error;
  raise_with(type, st.to_string(), to_string(st.code()));
}

void raise_config(std::vector<std::pair<std::string, std::string>> problems) {
  std::string message;
  py::list errors;
  for (const auto& [key, what] : problems) {
    if (!message.empty()) message += "; ";
    message += key.empty() ? what : key + ": " + what;
    errors.append(py::make_tuple(key, what));
  }
  const auto& t = types();
  py::object e = t.config_error(message);
  e.attr("code") = "invalid_argument";
  e.attr("errors") = errors;
  e.attr("key") = problems.empty() ? std::string{} : problems.front().first;
  PyErr_SetObject(t.config_error.ptr(), e.ptr());
  throw py::error_already_set();
}

void type_error(const std::string& message) {
  throw py::type_error(message);
}

void wrong_type(const char* what, const char* expected, PyObject* got) {
  type_error(std::string(what) + " must be " + expected + ", got " + Py_TYPE(got)->tp_name);
}

std::string_view text_of(py::handle s, const char* what) {
  if (!PyUnicode_Check(s.ptr())) wrong_type(what, "a str", s.ptr());
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  if (p == nullptr) throw py::error_already_set();
  return {p, static_cast<size_t>(n)};
}

}  // namespace kvc::python
