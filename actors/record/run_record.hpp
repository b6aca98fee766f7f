#pragma once
/// run_record: what a recorded run holds (issue 17, "Deterministic replay"), as plain owned
/// values: the header (schema version, config digest, the effective planner / coordinator
/// config) and, in the order the scheduler's engine thread made them, every input of the pure
/// cores (scheduler::planner, coordinator::step_coordinator) with a digest of what they
/// answered: the engine's calls into scheduler_connector, and each report, rank event, tick,
/// expect and poll of the step coordinator. replayer.hpp re-drives fresh cores from them.
///
/// Plain data; no I/O (recorder.hpp writes, record_reader.hpp reads, record_codec.hpp holds
/// the byte layout). Thread-safety: none needed (values).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/coordinator/step_coordinator.hpp"
#include "actors/scheduler/planner.hpp"
#include "proto/block_key.hpp"
#include "proto/step_report.hpp"

namespace kvc::record {

/// Bumped whenever the byte layout or the meaning of an event changes; a reader refuses
/// another version. 2: a completion event carries its failure detail. 3: every frame ends with
/// a checksum. 4: a request output carries its role (scheduler::request_output_role). 5: and
/// the engine's invalid block ids (they settle loads). 6: a metadata digest has a `failed` field.
inline constexpr uint32_t record_schema_version = 6;

/// The cores' configuration, everything a replay needs to rebuild them.
struct recorded_config {
  scheduler::planner_config planner;
  coordinator::coordinator_options coordinator;
  friend bool operator==(const recorded_config& a, const recorded_config& b);
};

struct record_header {
  uint32_t schema = record_schema_version;
  uint64_t config_digest = 0;  ///< config_digest(encoded config)
  recorded_config config;
};

/// Per-field digests of a ConnectorMetadata, in connector_metadata's field order.
struct metadata_digest {
  static constexpr std::array<std::string_view, 7> names = {
      "step", "loads", "stores", "flush", "failed", "flush_requests", "finished_requests"};
  std::array<uint64_t, 7> fields{};
  uint64_t combined() const noexcept;
  friend bool operator==(const metadata_digest&, const metadata_digest&) = default;
};

/// Per-field digests of an aggregated step output (connector_output).
struct output_digest {
  static constexpr std::array<std::string_view, 2> names = {"step", "jobs"};
  std::array<uint64_t, 2> fields{};
  uint64_t combined() const noexcept;
  friend bool operator==(const output_digest&, const output_digest&) = default;
};

metadata_digest digest_of(const connector_metadata& m);
output_digest digest_of(const connector_output& o);

/// A request_view's data, owned.
struct recorded_request {
  std::string id;
  std::vector<block_key> block_hashes;
  uint32_t num_tokens = 0;
  bool do_remote_decode = false;
  /// A view of this (valid while it lives).
  scheduler::request_view view() const noexcept {
    return {id, block_hashes, num_tokens, do_remote_decode};
  }
};

struct recorded_scheduled {
  recorded_request req;
  std::vector<gpu_block> block_ids;
  uint32_t num_computed = 0;
  uint32_t num_scheduled = 0;
  bool resumed = false;
};

/// Owned strings as views (valid while `v` lives).
inline std::vector<std::string_view> views(const std::vector<std::string>& v) {
  return {v.begin(), v.end()};
}

/// Owned scheduled requests as the planner's views (valid while `v` lives).
inline std::vector<scheduler::scheduled_request> views(const std::vector<recorded_scheduled>& v) {
  std::vector<scheduler::scheduled_request> out;
  out.reserve(v.size());
  for (const auto& s : v) {
    out.push_back({s.req.view(), s.block_ids, s.num_computed, s.num_scheduled, s.resumed});
  }
  return out;
}

// --- the engine's calls into scheduler_connector ---
struct match_event {  ///< get_num_new_matched_tokens
  recorded_request req;
  uint32_t num_computed = 0;
  std::optional<uint32_t> tokens;  ///< what the planner answered
};
struct alloc_event {  ///< update_state_after_alloc (block ids, or vLLM's block table)
  recorded_request req;
  std::vector<gpu_block> block_ids;
  bool with_table = false;      ///< the block-table overload
  std::vector<uint8_t> hashed;  ///< with_table: the per-block hashed flags
  uint32_t num_external = 0;
  bool ok = false;  ///< what the planner answered
};
struct build_event {  ///< build_connector_meta
  step_id step = 0;
  std::vector<recorded_scheduled> new_requests;
  std::vector<recorded_scheduled> cached_requests;
  std::vector<std::string> preempted;
  bool ok = false;         ///< the planner built a metadata
  metadata_digest digest;  ///< of that metadata (ok only)
};
struct finished_event {  ///< request_finished
  std::string id;
  bool delay_free = false;
};
struct request_output_event {  ///< apply_request_output
  std::vector<std::string> finished_sending;
  std::vector<std::string> finished_recving;
  scheduler::request_output_role role = scheduler::request_output_role::completes_jobs;
  std::vector<gpu_block> invalid_block_ids;
};
struct take_completions_event {};  ///< the planner's request completions were taken
struct reset_event {               ///< reset_cache
  bool ok = false;                 ///< what the planner answered
};

// --- what the step coordinator consumed ---
struct expect_event {  ///< expect(the step's metadata, now)
  step_id step = 0;
  uint64_t now = 0;
};
struct report_event {
  step_report report;
};
struct rank_up_event {
  rank_id rank = 0;
  uint32_t incarnation = 0;
};
struct rank_down_event {
  rank_id rank = 0;
};
struct tick_event {
  uint64_t now = 0;
};
struct poll_event {  ///< poll_output: released an output (its digest) or nothing
  bool released = false;
  output_digest digest;
};

using record_event =
    std::variant<match_event, alloc_event, build_event, finished_event, request_output_event,
                 take_completions_event, expect_event, report_event, rank_up_event, rank_down_event,
                 tick_event, poll_event, reset_event>;

/// A whole record as read back.
struct run_record {
  record_header header;
  std::vector<record_event> events;
};

}  // namespace kvc::record
