#pragma once
/// The parts of the `kvconnect._kvconnect` extension module, one function per part; module.cpp
/// calls them in order at import. Each part only converts between Python and kvconnect's C++
/// API (launch/config_loader, actors/embed): no decision of its own.
#include <pybind11/pybind11.h>

#include "launch/config/launch_config.hpp"
#include "proto/fault_plan.hpp"

namespace kvc::python {

/// A loaded, checked config (kvconnect.Config).
struct config_handle {
  launch::launch_config config;
};

void bind_config(pybind11::module_& m);     // config_binding.cpp
void bind_scheduler(pybind11::module_& m);  // scheduler_binding.cpp
void bind_worker(pybind11::module_& m);     // worker_binding.cpp

/// The config's runtime.faults (and fault_seed) that act at `site` (channel: the scheduler
/// side; copy: a worker), as `kvconnect scheduler` / `kvconnect worker` take them. A process
/// fault (kill_rank, hang_rank, kill_scheduler) is a ConfigError naming runtime.faults: only a
/// launcher injects those. config_binding.cpp.
fault_config faults_at_site(const config_handle& cfg, fault_site site);

/// {kind name: count} of the kinds that fired (docs/faults.md); scheduler_binding.cpp.
pybind11::dict fault_counts_dict(const fault_counts& counts);

}  // namespace kvc::python
