#pragma once
/// The role processes (`kvconnect scheduler`, `kvconnect worker`, role_processes.cpp):
/// command-line wrappers around the embedding API's facades, the same code path an engine
/// links; the scheduler runs the smoke run, the simulated engine or serves. They print
/// machine-readable JSON lines on stdout and log to stderr. Exit codes: 0 clean; 1 failure;
/// 2 for a bad --fault before anything starts; worker: 2 also when its registration failed
/// (refused, timed out, or the rank could not be set up after acceptance).
#include "launch/roles/role_options.hpp"

namespace kvc::launch {

int run_scheduler_process(const scheduler_process_options& opts);
int run_worker_process(const worker_process_options& opts);

}  // namespace kvc::launch
