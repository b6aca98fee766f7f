#pragma once
/// The parts of the `kvconnect._kvconnect` extension module, one function per part; module.cpp
/// calls them in order at import. Each part only converts between Python and kvconnect's C++
/// API (launch/config_loader, actors/embed): no decision of its own.
#include <pybind11/pybind11.h>

#include "launch/launch_config.hpp"

namespace kvc::python {

/// A loaded, checked config (kvconnect.Config).
struct config_handle {
  launch::launch_config config;
};

void bind_config(pybind11::module_& m);     // config_binding.cpp
void bind_scheduler(pybind11::module_& m);  // scheduler_binding.cpp
void bind_worker(pybind11::module_& m);     // worker_binding.cpp

}  // namespace kvc::python
