// kvconnect._kvconnect: the Python binding of kvconnect's embedding API (docs/python.md).
#include <pybind11/pybind11.h>

#include "python/src/bindings.hpp"
#include "python/src/errors.hpp"

#ifndef KVC_VERSION
#error "KVC_VERSION must be defined by the build"
#endif

PYBIND11_MODULE(_kvconnect, m) {
  m.doc() = "kvconnect: KV-cache offload for inference engines (C++ core; docs/python.md)";
  m.attr("__version__") = KVC_VERSION;
  kvc::python::register_errors(m);
  kvc::python::bind_config(m);
  kvc::python::bind_scheduler(m);
  kvc::python::bind_worker(m);
}
