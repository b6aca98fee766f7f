#include "python/src/block_hashes.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "python/src/errors.hpp"

namespace kvc::python {
namespace py = pybind11;

namespace {

uint64_t big_endian(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

/// The 8 bytes at `p`, big-endian: one load (vLLM's hashes are 32 bytes, two of these a key).
uint64_t big_endian8(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap64(v);
  return v;
}

[[noreturn]] void value_error(const std::string& message) {
  throw py::value_error(message);
}

}  // namespace

block_key key_of(py::handle h) {
  PyObject* o = h.ptr();
  if (PyBytes_Check(o)) {
    const auto* p = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(o));
    const auto n = static_cast<size_t>(PyBytes_GET_SIZE(o));
    if (n >= 16) return {big_endian8(p + n - 16), big_endian8(p + n - 8)};
    if (n == 0) value_error("a block hash must not be empty");
    const size_t lo_n = n < 8 ? n : 8;
    const size_t hi_n = n <= 8 ? 0 : (n < 16 ? n - 8 : 8);
    return {big_endian(p + n - lo_n - hi_n, hi_n), big_endian(p + n - lo_n, lo_n)};
  }
#if PY_VERSION_HEX < 0x030C0000
  // Before 3.12 an int is its size and 30-bit digits: one below 2**64 is read from them directly
  // (PyLong_AsUnsignedLong's call and checks cost several times more per hash).
  if (PyLong_CheckExact(o)) {
    const Py_ssize_t size = Py_SIZE(o);
    const digit* d = reinterpret_cast<PyLongObject*>(o)->ob_digit;
    static_assert(PyLong_SHIFT == 30);
    if (size == 0) return {0, 0};
    if (size == 1) return {0, d[0]};
    if (size == 2) return {0, d[0] | uint64_t{d[1]} << 30};
    if (size == 3 && d[2] < 16) return {0, d[0] | uint64_t{d[1]} << 30 | uint64_t{d[2]} << 60};
  }
#endif
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    // PyLong_AsUnsignedLong reads the digits directly; CPython's ...LongLong converts an int of
    // more than one digit through a byte array, several times slower.
    static_assert(sizeof(unsigned long) == sizeof(uint64_t));
    const unsigned long lo = PyLong_AsUnsignedLong(o);
    if (!(lo == static_cast<unsigned long>(-1) && PyErr_Occurred())) return {0, lo};
    PyErr_Clear();
    py::int_ v = py::reinterpret_borrow<py::int_>(h);
    if (v < py::int_(0)) value_error("a block hash must not be negative");
    py::int_ hi = v.attr("__rshift__")(64);
    const unsigned long long hi_v = PyLong_AsUnsignedLongLong(hi.ptr());
    if (hi_v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      value_error("a block hash int must be below 2**128");
    }
    const unsigned long long lo_v = PyLong_AsUnsignedLongLongMask(o);
    return {hi_v, lo_v};
  }
  type_error("a block hash must be bytes or int, got " +
             std::string(py::str(py::type::handle_of(h).attr("__name__"))));
}

py::object int_of(const block_key& key) {
  if (key.hi == 0) return py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(key.lo));
  py::int_ hi = py::reinterpret_steal<py::int_>(PyLong_FromUnsignedLongLong(key.hi));
  py::int_ lo = py::reinterpret_steal<py::int_>(PyLong_FromUnsignedLongLong(key.lo));
  return hi.attr("__lshift__")(64).attr("__or__")(lo);
}

py::list int_list(std::span<const block_key> keys) {
  py::list out;
  for (const block_key& k : keys) out.append(int_of(k));
  return out;
}

}  // namespace kvc::python
