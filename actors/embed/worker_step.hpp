#pragma once
/// run_worker_step: vLLM's worker call order for one engine step, written once. Every engine
/// that drives a worker_connector (the simulated engine's model runner, the served worker loop,
/// the example engine, `kvconnect bench step`, the multi-process test worker) runs its steps
/// through it and adds only its own parts through the hooks:
///
///   bind_connector_metadata(step)          (a metadata the connector refuses still binds)
///   handle_preemptions(submit)
///   start_load_kv(submit)
///   hooks.forward(first_error)             the model's forward: after the loads start,
///                                          before the saves
///   wait_for_save()
///   hooks.after_save()                     e.g. finish_transfers for a step with no forward
///   get_finished(finished_ids)             hooks.finished_ids, or the metadata's
///                                          finished_requests when null
///   get_block_ids_with_load_errors()
///   clear_connector_metadata()
///
/// This is the order of vLLM's GPU model runner (R1: the KV connector mixin binds the metadata
/// and starts the loads before the forward, waits for the saves after it, then takes
/// get_finished and the load errors, and clears the metadata; the runner calls
/// handle_preemptions(metadata) before binding, with the metadata as argument: here it reads
/// the bound metadata, so binding comes first). Once the step is
/// bound every call runs, whatever failed before, so that the step is reported and cleared;
/// the outcome keeps the first error and counts the failures. When nothing could be bound
/// (a timeout, the scheduler gone) no other call is made.
///
/// A template over the worker type so that a recording fake can check the order; engines use
/// it with embed::worker_connector.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/embed/worker_connector.hpp"
#include "cuda/copy_engine.hpp"
#include "proto/status.hpp"

namespace kvc::embed {

/// The engine's parts of one worker step; every hook is optional.
struct worker_step_hooks {
  /// How handle_preemptions and start_load_kv submit their copies.
  cuda::submit_options submit{};
  /// The forward pass, given the first error so far; its error counts like a call's.
  std::function<status(const status& first_error)> forward;
  /// Right after wait_for_save (a worker with no forward finishes its transfers here).
  std::function<status()> after_save;
  /// The requests finished in the previous step; null: the bound metadata's finished_requests.
  const std::vector<std::string>* finished_ids = nullptr;
};

/// What one step did.
struct worker_step_outcome {
  /// False when bind_connector_metadata bound nothing: no other call was made.
  bool bound = false;
  /// The first failure (bind, a connector call or a hook) and where it happened: the call's
  /// name, "forward" or "after_save"; success and empty when nothing failed.
  status first_error = status::success();
  std::string_view failed_call;
  /// How many of the step's calls and hooks failed.
  size_t failures = 0;
  finished_requests finished;
  std::vector<gpu_block> load_errors;
};

template <typename Worker, typename BindTimeout>
worker_step_outcome run_worker_step(Worker& w, step_id step, BindTimeout bind_timeout,
                                    const worker_step_hooks& hooks = {}) {
  worker_step_outcome out;
  auto keep = [&out](std::string_view call, status st) {
    if (st) return;
    ++out.failures;
    if (out.first_error) {
      out.first_error = std::move(st);
      out.failed_call = call;
    }
  };
  keep("bind", w.bind_connector_metadata(step, bind_timeout));
  if (w.metadata() == nullptr) return out;  // nothing bound: nothing to run or clear
  out.bound = true;
  keep("handle_preemptions", w.handle_preemptions(hooks.submit));
  keep("start_load_kv", w.start_load_kv(hooks.submit));
  if (hooks.forward) keep("forward", hooks.forward(out.first_error));
  keep("wait_for_save", w.wait_for_save());
  if (hooks.after_save) keep("after_save", hooks.after_save());
  const std::vector<std::string>& ids =
      hooks.finished_ids != nullptr ? *hooks.finished_ids : w.metadata()->finished_requests;
  out.finished = w.get_finished(std::span<const std::string>{ids});
  out.load_errors = w.get_block_ids_with_load_errors();
  w.clear_connector_metadata();
  return out;
}

}  // namespace kvc::embed
