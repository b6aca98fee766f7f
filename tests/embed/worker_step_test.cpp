/// run_worker_step: the worker calls of one engine step come in vLLM's order, the forward hook
/// between the loads and the saves, every call once the step is bound, and none after a bind
/// that bound nothing. A recording fake stands for the worker_connector.
#include "actors/embed/worker_step.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace kvc::embed {
namespace {

using namespace std::chrono_literals;

/// Records every call; fails the calls named in `fail`.
class recording_worker {
 public:
  std::vector<std::string> calls;
  std::vector<std::string> fail;
  bool bind_binds = true;
  std::optional<connector_metadata> bound;
  std::vector<std::string> finished_seen;
  std::optional<cuda::submit_options> load_submit;

  status bind_connector_metadata(step_id step, std::chrono::nanoseconds) {
    if (bind_binds) bound = connector_metadata{.step = step, .finished_requests = {"m1", "m2"}};
    return record("bind");
  }
  const connector_metadata* metadata() const { return bound ? &*bound : nullptr; }
  status handle_preemptions(const cuda::submit_options&) { return record("handle_preemptions"); }
  status start_load_kv(const cuda::submit_options& opts) {
    load_submit = opts;
    return record("start_load_kv");
  }
  status wait_for_save() { return record("wait_for_save"); }
  finished_requests get_finished(std::span<const std::string> ids) {
    finished_seen.assign(ids.begin(), ids.end());
    (void)record("get_finished");
    return {.finished_sending = {"s"}, .finished_recving = {"r"}, .jobs = {}};
  }
  std::vector<gpu_block> get_block_ids_with_load_errors() {
    (void)record("get_block_ids_with_load_errors");
    return {7};
  }
  void clear_connector_metadata() {
    (void)record("clear_connector_metadata");
    bound.reset();
  }

 private:
  status record(const std::string& call) {
    calls.push_back(call);
    for (const auto& f : fail) {
      if (f == call) return make_error(errc::io_error, call + " failed");
    }
    return status::success();
  }
};

worker_step_hooks recording_hooks(recording_worker& w) {
  worker_step_hooks h;
  h.forward = [&w](const status&) {
    w.calls.push_back("forward");
    return status::success();
  };
  h.after_save = [&w] {
    w.calls.push_back("after_save");
    return status::success();
  };
  return h;
}

TEST(WorkerStep, CallsComeInVllmOrderWithTheForwardBetweenLoadsAndSaves) {
  recording_worker w;
  auto hooks = recording_hooks(w);
  hooks.submit = {.wait_event = nullptr, .no_dependency = true};
  const std::vector<std::string> prev{"a", "b"};
  hooks.finished_ids = &prev;
  const auto out = run_worker_step(w, 5, 1s, hooks);
  EXPECT_EQ(w.calls, (std::vector<std::string>{"bind", "handle_preemptions", "start_load_kv",
                                               "forward", "wait_for_save", "after_save",
                                               "get_finished", "get_block_ids_with_load_errors",
                                               "clear_connector_metadata"}));
  EXPECT_TRUE(out.bound);
  EXPECT_TRUE(out.first_error.ok());
  EXPECT_EQ(out.failures, 0u);
  EXPECT_EQ(w.finished_seen, prev);
  ASSERT_TRUE(w.load_submit.has_value());
  EXPECT_TRUE(w.load_submit->no_dependency);
  EXPECT_EQ(out.finished.finished_sending, std::vector<std::string>{"s"});
  EXPECT_EQ(out.finished.finished_recving, std::vector<std::string>{"r"});
  EXPECT_EQ(out.load_errors, std::vector<gpu_block>{7});
  EXPECT_EQ(w.metadata(), nullptr);
}

TEST(WorkerStep, WithoutFinishedIdsTheMetadatasFinishedRequestsAreReported) {
  recording_worker w;
  (void)run_worker_step(w, 1, 1s);
  EXPECT_EQ(w.finished_seen, (std::vector<std::string>{"m1", "m2"}));
  EXPECT_EQ(w.calls.size(), 7u);  // no hooks: the seven connector calls
}

TEST(WorkerStep, ABoundStepRunsEveryCallAndKeepsTheFirstError) {
  recording_worker w;
  w.fail = {"start_load_kv", "wait_for_save"};
  status forward_saw = status::success();
  worker_step_hooks hooks;
  hooks.forward = [&](const status& so_far) {
    forward_saw = so_far;
    return make_error(errc::internal, "forward failed");
  };
  const auto out = run_worker_step(w, 2, 1s, hooks);
  EXPECT_EQ(w.calls, (std::vector<std::string>{"bind", "handle_preemptions", "start_load_kv",
                                               "wait_for_save", "get_finished",
                                               "get_block_ids_with_load_errors",
                                               "clear_connector_metadata"}));
  EXPECT_EQ(out.failed_call, "start_load_kv");
  EXPECT_EQ(out.first_error.code(), errc::io_error);
  EXPECT_EQ(forward_saw.code(), errc::io_error);  // the forward sees the loads' failure
  EXPECT_EQ(out.failures, 3u);
}

TEST(WorkerStep, ARefusedMetadataIsStillRunAndCleared) {
  recording_worker w;
  w.fail = {"bind"};
  const auto out = run_worker_step(w, 3, 1s);
  EXPECT_TRUE(out.bound);
  EXPECT_EQ(out.failed_call, "bind");
  EXPECT_EQ(w.calls.back(), "clear_connector_metadata");
}

TEST(WorkerStep, ABindThatBoundNothingMakesNoOtherCall) {
  recording_worker w;
  w.bind_binds = false;
  w.fail = {"bind"};
  bool forwarded = false;
  worker_step_hooks hooks;
  hooks.forward = [&](const status&) {
    forwarded = true;
    return status::success();
  };
  const auto out = run_worker_step(w, 4, 1s, hooks);
  EXPECT_FALSE(out.bound);
  EXPECT_EQ(out.failed_call, "bind");
  EXPECT_EQ(out.failures, 1u);
  EXPECT_EQ(w.calls, std::vector<std::string>{"bind"});
  EXPECT_FALSE(forwarded);
}

}  // namespace
}  // namespace kvc::embed
