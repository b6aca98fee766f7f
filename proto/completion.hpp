#pragma once
/// Completion vocabulary: what one rank reports for one job (completion_event), what the
/// coordinator concludes once every rank has spoken (job_result), and the aggregated output of a
/// step that the scheduler consumes (connector_output).
///
/// A completion event names its sender (rank + incarnation, bumped whenever a rank restarts) and
/// carries a per-sender sequence number, so duplicates and stale senders can be recognised.
///
/// A failure says why in words besides its errc (`detail`, empty on success): the failing device
/// call and its CUDA error name, the injected fault, the refused submit's message, or the
/// coordinator's reason (a rank lost, a deadline). At most max_detail_bytes; clip_detail() cuts
/// longer texts on a UTF-8 character boundary and the step channel refuses a longer one.
///
/// Doubles are inspected through exact_double (CAF 0.17's own double packing hangs on infinity).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proto/connector_metadata.hpp"
#include "proto/errc.hpp"
#include "proto/exact_double.hpp"
#include "proto/ids.hpp"

namespace kvc {

inline constexpr size_t max_detail_bytes = 256;

/// `text` cut to at most max_detail_bytes, never inside a UTF-8 sequence.
std::string clip_detail(std::string_view text);

struct job_result;
/// "ok", or the error's name and the detail: "device_error: cudaEventQuery returned ...".
std::string outcome_text(const job_result& r);
/// One log line for a failed job: "job 7 (store) failed: device_error: cudaEventQuery ...".
std::string failure_line(const job_result& r);

struct completion_event {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  uint64_t seq = 0;          ///< per (rank, incarnation), from 0, no gaps
  step_id step = 0;          ///< the step in which the worker observed completion
  job_id job = 0;
  transfer_kind kind = transfer_kind::load;
  bool ok = false;
  errc error = errc::ok;     ///< why it failed; errc::ok on success
  uint64_t bytes = 0;
  double seconds = 0.0;
  std::string detail;        ///< why it failed in words; "" on success

  friend bool operator==(const completion_event&, const completion_event&) = default;
};

/// A job's outcome across all ranks: ok when every rank reported ok, failed as soon as one
/// rank reported a failure. bytes/seconds: sum of bytes, max of seconds over the ranks.
/// detail: the failing rank's detail prefixed "rank N: ", or the coordinator's reason.
struct job_result {
  job_id job = 0;
  transfer_kind kind = transfer_kind::load;
  bool ok = false;
  errc error = errc::ok;
  uint64_t bytes = 0;
  double seconds = 0.0;
  std::string detail;  ///< why it failed in words; "" on success

  friend bool operator==(const job_result&, const job_result&) = default;
};

/// One step's aggregated worker output, forwarded by the coordinator to the scheduler.
struct connector_output {
  step_id step = 0;
  std::vector<job_result> jobs;

  friend bool operator==(const connector_output&, const connector_output&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, completion_event& x) {
  return f(x.rank, x.incarnation, x.seq, x.step, x.job, x.kind, x.ok, x.error, x.bytes,
           exact_double{x.seconds}, x.detail);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, job_result& x) {
  return f(x.job, x.kind, x.ok, x.error, x.bytes, exact_double{x.seconds}, x.detail);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, connector_output& x) {
  return f(x.step, x.jobs);
}

}  // namespace kvc
