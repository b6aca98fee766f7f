// The step-observer seam changes nothing it observes (actors/embed/step_observer.hpp): the same
// seeded soak (the simulated engine over the embedding API, every rank in this process, the
// deterministic manual copy engine, channel and copy faults) runs once with every observer the
// facade has off and once with the trace (level jobs), the run record, the KV-event publisher
// and the metrics on. Every frame the scheduler's end of the step channel sent and received
// (the metadata, the reports and their job results), the run's counts and every finished
// request must be identical; the observers on must have written their outputs.
// (The /metrics server needs a fixed port in a launch config; its observer is the same object
// with and without a server, and the embed tests serve it on a free port.)
#include "launch/engines/sim/in_process_run.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "actors/channel/transport.hpp"
#include "launch/config/config_loader.hpp"
#include "proto/fault_spec_parser.hpp"
#include "tests/shm/shm_fixture.hpp"

namespace kvc::sim {
namespace {

namespace fs = std::filesystem;

/// Writes down every frame its target sends and receives, in order ("out"/"in", peer, bytes).
class frame_log final : public channel::server_transport {
 public:
  frame_log(std::unique_ptr<channel::server_transport> target,
            std::shared_ptr<std::vector<std::string>> lines)
      : target_(std::move(target)), lines_(std::move(lines)) {}

  const std::string& remote_endpoint() const noexcept override {
    return target_->remote_endpoint();
  }
  result<std::unique_ptr<channel::client_transport>> connect_local(
      const std::string& peer) override {
    return target_->connect_local(peer);
  }
  status send(std::string_view peer, std::span<const char> bytes) override {
    lines_->push_back("out " + std::string(peer) + " " + std::string(bytes.begin(), bytes.end()));
    return target_->send(peer, bytes);
  }
  result<std::optional<channel::inbound_frame>> receive(
      std::chrono::milliseconds timeout) override {
    auto got = target_->receive(timeout);
    if (got && *got) {
      const auto& f = **got;
      lines_->push_back("in " + f.peer + " " + std::string(f.bytes.begin(), f.bytes.end()));
    }
    return got;
  }

 private:
  std::unique_ptr<channel::server_transport> target_;
  std::shared_ptr<std::vector<std::string>> lines_;
};

struct observed_run {
  run_report report;
  std::vector<std::string> frames;
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ObserverParityTest : public shm::testing::ShmTest {
 protected:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    ShmTest::TearDown();
  }

  observed_run run(bool observed) {
    std::vector<std::string> sets{
        "kv_cache.layers=2", "kv_cache.kv_heads=2", "kv_cache.head_dim=8", "kv_cache.gpu_blocks=96",
        "offload.cpu_bytes_to_use=1MiB", "offload.block_size=32", "workload.requests=40",
        "workload.arrival_rate=1.5", "workload.prompt_tokens.min=64",
        "workload.prompt_tokens.max=512", "workload.shared_prefix_tokens.min=64",
        "workload.shared_prefix_tokens.max=384", "workload.documents=5",
        "workload.output_tokens.min=4", "workload.output_tokens.max=48",
        "workload.multi_turn.probability=0.5", "workload.max_running=8",
        "workload.max_batched_tokens=512", "workload.steps=200", "workload.seed=21",
        // A dropped report fails its jobs by steps, never by time.
        "runtime.job_timeout_ms=0", "runtime.job_timeout_steps=8"};
    if (observed) {
      sets.insert(sets.end(),
                  {"observe.trace=jobs", "observe.trace_dir=" + (dir_ / "trace").string(),
                   "observe.record=true", "observe.record_dir=" + (dir_ / "record").string(),
                   "observe.kv_events.endpoint=tcp://127.0.0.1:*",
                   "observe.kv_events.replay_endpoint=tcp://127.0.0.1:*"});
    }
    auto loaded = launch::load_config("", "<test>", sets);
    EXPECT_TRUE(loaded.ok());
    in_process_options o;
    o.config = loaded.config;
    o.instance = shm::testing::test_instance_prefix() + "parity" + std::to_string(runs_++);
    o.faults.seed = 4;
    for (const char* spec : {"drop_report:p=0.03", "duplicate_report:p=0.03",
                             "reorder_reports:p=0.02", "fail_copy:dir=store,p=0.05"}) {
      auto parsed = parse_fault_spec(spec);
      EXPECT_TRUE(parsed.ok()) << spec;
      if (parsed) o.faults.specs.push_back(*parsed);
    }
    auto lines = std::make_shared<std::vector<std::string>>();
    o.wrap_transport = [lines](std::unique_ptr<channel::server_transport> t) {
      return std::unique_ptr<channel::server_transport>{new frame_log(std::move(t), lines)};
    };
    auto rep = run_in_process(o);
    EXPECT_TRUE(rep.ok()) << rep.error().to_string();
    return {rep ? *rep : run_report{}, *lines};
  }

  const fs::path dir_ =
      fs::temp_directory_path() / ("kvc-observer-parity-" + std::to_string(::getpid()));
  int runs_ = 0;
};

TEST_F(ObserverParityTest, EveryObserverOnOrOffGivesTheSameStepsAndAnswers) {
  const observed_run off = run(false);
  const observed_run on = run(true);

  EXPECT_EQ(counts_json(off.report), counts_json(on.report));
  EXPECT_EQ(off.report.finished, on.report.finished);
  ASSERT_EQ(off.frames.size(), on.frames.size());
  for (size_t i = 0; i < off.frames.size(); ++i) {
    ASSERT_EQ(off.frames[i], on.frames[i]) << "frame " << i << " of " << off.frames.size();
  }
  // The run did what the comparison is about: steps with transfers, faults that fired.
  EXPECT_GT(off.report.requests_finished, 0u);
  EXPECT_GT(off.report.blocks_loaded, 0u);
  EXPECT_GT(off.report.jobs_failed, 0u);
  EXPECT_GT(off.frames.size(), 400u);

  // The observers on wrote their outputs: the scheduler's trace with the facade's records, and
  // a run record.
  std::string scheduler_trace;
  for (const auto& e : fs::directory_iterator(dir_ / "trace")) {
    if (e.path().filename().string().starts_with("scheduler-")) {
      scheduler_trace += read_all(e.path());
    }
  }
  for (const char* type : {"\"build_connector_meta\"", "\"output_applied\"", "\"job_planned\"",
                           "\"job_applied\"", "\"pool_slots\""}) {
    EXPECT_NE(scheduler_trace.find(type), std::string::npos) << type;
  }
  size_t records = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "record")) {
    if (e.path().extension() == ".kvcrec" && fs::file_size(e.path()) > 0) ++records;
  }
  EXPECT_EQ(records, 1u);
}

}  // namespace
}  // namespace kvc::sim
