#pragma once
/// recorder: writes a run record (record_codec.hpp) from the scheduler process: the header at
/// open(), then one event per call, in call order. The scheduler_connector facade's record
/// observer calls the engine-call methods, recording_core (the decorator at the coordinator's
/// core) the step-coordinator ones, right where the pure core consumes each input, so the file
/// is the cores' input sequence.
///
/// Buffered: events are packed into memory and written when the buffer passes flush_bytes and
/// at close(). A write error is kept (health()) and turns every later call into a no-op; close()
/// returns it. Owns its file. Not thread-safe: the engine's scheduler thread calls everything.
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "actors/record/hash_memory.hpp"
#include "actors/record/run_record.hpp"
#include "proto/status.hpp"

namespace kvc::record {

class recorder {
 public:
  static constexpr size_t flush_bytes = size_t{1} << 20;

  /// Creates (truncates) `path`, mode 0600 (proto/private_files.hpp), and writes the magic and
  /// the header for `cfg`. errc::io_error naming the path when it cannot be written.
  static result<std::unique_ptr<recorder>> open(const std::string& path,
                                                const recorded_config& cfg);
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;
  /// close(); an error is lost here (call close() to see it).
  ~recorder();

  // --- the engine's calls, with what the planner answered ---
  void match(const scheduler::request_view& req, uint32_t num_computed,
             const scheduler::match_result& answer);
  void alloc(const scheduler::request_view& req, std::span<const gpu_block> block_ids,
             uint32_t num_external, bool ok);
  void alloc(const scheduler::request_view& req, const scheduler::block_table_view& blocks,
             uint32_t num_external, bool ok);
  /// `meta`: the metadata built, or null when the planner refused the step.
  void build(const scheduler::step_input& in, const connector_metadata* meta);
  void finished(std::string_view req_id, bool delay_free);
  void request_output(const scheduler::request_output& out);
  void take_completions();
  void reset(bool ok);

  // --- what the step coordinator consumed ---
  void expect(step_id step, uint64_t now);
  void report(const step_report& r);
  void rank_up(rank_id rank, uint32_t incarnation);
  void rank_down(rank_id rank);
  void tick(uint64_t now);
  void poll(const std::optional<connector_output>& out);

  /// Writes what is buffered and closes the file (idempotent). The first write error, if any.
  status close();
  status health() const { return error_; }
  const std::string& path() const noexcept { return path_; }
  uint64_t events() const noexcept { return events_; }

 private:
  struct buffer;  // the msgpack buffer and packer (recorder.cpp)
  recorder(std::string path, std::FILE* file);
  /// Starts a frame (end_frame patches its length in and appends its checksum).
  bool begin_frame();
  void end_frame();
  void write_out();

  std::string path_;
  std::FILE* file_;
  std::unique_ptr<buffer> out_;
  hash_memory hashes_;
  size_t frame_start_ = 0;
  uint64_t events_ = 0;
  status error_;
};

}  // namespace kvc::record
