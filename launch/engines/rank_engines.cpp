// The rank side of each engine (engine.hpp): the synthetic KV cache's transfers (serve, smoke)
// and the simulated engine's model runner.
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/embed/worker_step.hpp"
#include "cuda/engine_factory.hpp"
#include "launch/engines/engine.hpp"
#include "launch/engines/sim/executor_channel.hpp"
#include "launch/engines/sim/model_runner.hpp"
#include "launch/engines/smoke/synthetic_kv.hpp"

namespace kvc::launch {

namespace {

/// How often the worker's loop looks at signals while no step arrives.
constexpr std::chrono::milliseconds idle_slice{100};

/// Every step's calls in vLLM's order (run_worker_step), the transfers finished before the
/// report (no forward pass to overlap them with), until the scheduler stops the rank or a
/// signal.
status run_steps(embed::worker_connector& wc, signal_watcher& signals) {
  while (!signals.signalled()) {
    auto step = wc.next_metadata_step(idle_slice);
    if (!step) {
      if (step.error().code() == errc::timeout) continue;
      return step.error();
    }
    // No forward pass, no compute stream: the copies depend on nothing (cuda::submit_options).
    // No engine tells this worker which requests finished: the metadata does (finished_ids
    // null); the job results say which loads failed.
    const cuda::submit_options no_compute{.no_dependency = true};
    const auto out = embed::run_worker_step(
        wc, *step, idle_slice,
        {.submit = no_compute, .after_save = [&] { return wc.finish_transfers(no_compute); }});
    if (!out.bound) {
      if (out.first_error.code() == errc::timeout) continue;
      return out.first_error;
    }
    if (!out.first_error) {
      spdlog::error("worker {}: step {}: {}", wc.rank(), *step, out.first_error.to_string());
    }
    if (auto health = wc.device_health(); !health) return health;  // the step was reported
  }
  return status::success();
}

/// The ranks of serving and of the smoke run: the synthetic KV cache (its bytes the smoke run
/// checks), every step's transfers without a forward pass. Nothing to run without a connector.
class synthetic_rank final : public rank_engine {
 public:
  synthetic_rank(const worker_process_options& o, engine_io io) : o_(o), io_(std::move(io)) {}
  status prepare(embed::worker_connector& wc) override {
    return install_synthetic_kv(wc, o_.pool.kv);
  }
  status run(embed::worker_connector& wc) override { return run_steps(wc, io_.signals); }

 private:
  const worker_process_options& o_;
  engine_io io_;
};

/// A rank's connector time of each step, to the launcher as the run goes:
/// {"event":"connector_steps","rank":r,"ns":[[step,ns],...]} every `batch` steps and the rest
/// before the "runner" line (the launcher folds them: launch::slowest_rank_sum). The worker's
/// memory and every line stay bounded however long the run.
class connector_steps_out {
 public:
  static constexpr size_t batch = 1024;
  connector_steps_out(rank_id rank, const engine_io& io) : rank_(rank), io_(io) {
    steps_.reserve(batch);
  }
  void add(step_id step, uint64_t ns) {
    steps_.emplace_back(step, ns);
    if (steps_.size() >= batch) flush();
  }
  void flush() {
    if (steps_.empty()) return;
    io_.emit(connector_steps_event{rank_, steps_});
    steps_.clear();
  }

 private:
  rank_id rank_;
  const engine_io& io_;
  std::vector<std::pair<step_id, uint64_t>> steps_;
};

/// The simulated engine's model on this rank: each step's model input from the executor
/// channel, run through the model runner, until the channel's end, the scheduler's going or a
/// signal; then its figures ("runner") and, like every rank, the steps until it is stopped.
/// Without a connector (offloading off) the runner's KV cache is in a copy engine of its own
/// (the worker's backend and device), each step is its forward pass alone, and the rank ends
/// with the channel.
class sim_rank final : public rank_engine {
 public:
  sim_rank(const worker_process_options& o, engine_io io)
      : o_(o), io_(std::move(io)), step_times_(o.rank, io_) {}
  status prepare(embed::worker_connector& wc) override { return set_up(&wc); }
  status prepare_without_offload() override { return set_up(nullptr); }
  status run(embed::worker_connector& wc) override { return drive(&wc); }
  status run_without_offload() override { return drive(nullptr); }

 private:
  /// prepare over `wc` (null: offloading off).
  status set_up(embed::worker_connector* wc);
  /// run over `wc` (null: offloading off).
  status drive(embed::worker_connector* wc);
  status run_model(embed::worker_connector* wc);

  const worker_process_options& o_;
  engine_io io_;
  connector_steps_out step_times_;
  std::unique_ptr<cuda::copy_engine> own_engine_;  ///< offloading off: the KV cache's
  std::optional<sim::model_runner> runner_;
  std::unique_ptr<sim::executor_subscriber> executor_;
};

status sim_rank::set_up(embed::worker_connector* wc) {
  const sim::runner_geometry g{.layers = o_.pool.kv.layers,
                               .page_bytes = o_.pool.kv.page_bytes,
                               .gpu_blocks = o_.pool.kv.gpu_blocks,
                               .gpu_block_size = o_.gpu_block_size,
                               .finish_transfers = true};
  if (wc == nullptr) {
    auto e = cuda::make_copy_engine({.backend = o_.backend, .device = o_.device});
    if (!e) return e.error();
    own_engine_ = std::move(e).value();
  }
  auto r = sim::model_runner::create(wc ? wc->copy_engine() : *own_engine_, wc, o_.rank, g);
  if (!r) return r.error();
  runner_.emplace(std::move(r).value());
  runner_->on_step_connector_ns([this](step_id s, uint64_t ns) { step_times_.add(s, ns); });
  auto sub = sim::executor_subscriber::connect(o_.executor, o_.token);
  if (!sub) return sub.error();
  executor_ = std::move(sub).value();
  return status::success();
}

status sim_rank::run_model(embed::worker_connector* wc) {
  constexpr std::chrono::seconds bind_timeout{30};
  while (!io_.signals.signalled()) {
    auto m = executor_->receive(idle_slice);
    if (!m) return m.error();
    if (!m->has_value()) {
      if (wc != nullptr && !wc->connected()) return status::success();
      continue;
    }
    if ((*m)->end) return status::success();
    if (auto st = runner_->run_step((*m)->input, bind_timeout); !st) {
      spdlog::error("worker {}: step {}: {}", o_.rank, (*m)->input.step, st.to_string());
      if (wc == nullptr) return st;  // the forward failed: no step after it can be right
    }
    if (wc == nullptr) continue;
    if (auto health = wc->device_health(); !health) return health;  // the step was reported
  }
  return status::success();
}

status sim_rank::drive(embed::worker_connector* wc) {
  const status model = run_model(wc);
  if (!model) {
    // A lost device ends the process: its runner line is not printed (like a killed rank's,
    // its figures go with it).
    if (model.code() == errc::device_unavailable) return model;
    spdlog::error("worker {}: {}", o_.rank, model.to_string());
  }
  step_times_.flush();
  const auto& s = runner_->stats();
  io_.emit(runner_event{.rank = o_.rank,
                        .steps = s.steps,
                        .tokens_written = s.tokens_written,
                        .loads_verified = s.loads_verified,
                        .load_mismatches = s.load_mismatches,
                        .blocks_load_failed = s.blocks_load_failed,
                        .step_errors = s.step_errors,
                        .steps_connector_only = s.steps_connector_only,
                        .steps_skipped = s.steps_skipped,
                        .connector_ns = static_cast<uint64_t>(s.connector_ns),
                        .mismatches = s.mismatches});
  // With a connector the scheduler stops the rank; without, the model's end is the rank's.
  return wc ? run_steps(*wc, io_.signals) : model;
}

}  // namespace

status rank_engine::prepare_without_offload() {
  return make_error(errc::invalid_argument,
                    "this engine's ranks need the connector (offload.enabled true)");
}

status rank_engine::run_without_offload() {
  return make_error(errc::invalid_argument,
                    "this engine's ranks need the connector (offload.enabled true)");
}

std::unique_ptr<rank_engine> make_rank_engine(engine_kind kind, const worker_process_options& o,
                                              engine_io io) {
  if (traits_of(kind).executor_channel) return std::make_unique<sim_rank>(o, std::move(io));
  return std::make_unique<synthetic_rank>(o, std::move(io));
}

result<std::unique_ptr<rank_engine>> make_rank_engine(std::string_view name,
                                                      const worker_process_options& o,
                                                      engine_io io) {
  auto kind = parse_engine_kind(name);
  if (!kind) return kind.error();
  return make_rank_engine(*kind, o, std::move(io));
}

}  // namespace kvc::launch
