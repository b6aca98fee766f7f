#pragma once
/// Completion vocabulary: one rank's outcome of one job as its worker observed it
/// (rank_job_result), what the rank reports for it on the step channel (completion_event: the
/// rank's result stamped by worker::completion_stamper, the one place the first becomes the
/// second), what the coordinator concludes once every rank has spoken (job_result), and the
/// aggregated output of a step that the scheduler consumes (connector_output).
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

/// The fields of a job's outcome, written once for its two scopes, which stay distinct types
/// (`Scope` is only a tag) so that neither is passed where the other is meant: one rank's
/// result (rank_job_result) and the result across every rank (job_result).
template <class Scope>
struct basic_job_result {
  job_id job = 0;
  transfer_kind kind = transfer_kind::load;
  bool ok = false;
  errc error = errc::ok;
  uint64_t bytes = 0;
  double seconds = 0.0;
  std::string detail;  ///< why it failed in words; "" on success

  friend bool operator==(const basic_job_result&, const basic_job_result&) = default;
};

struct one_rank_scope;
struct all_ranks_scope;

/// One rank's outcome of one job as its worker observed it (the transfer executor's or the
/// tier executor's): bytes and seconds are the rank's own, detail its own words (the failing
/// device call, the injected fault, the refused submit). What a rank's get_finished hands out;
/// it never crosses the wire itself: worker::completion_stamper turns it into a
/// completion_event.
using rank_job_result = basic_job_result<one_rank_scope>;

/// A job's outcome across all ranks: ok when every rank reported ok, failed as soon as one
/// rank reported a failure. bytes/seconds: sum of bytes, max of seconds over the ranks.
/// detail: the failing rank's detail prefixed "rank N: ", or the coordinator's reason.
using job_result = basic_job_result<all_ranks_scope>;

/// "ok", or the error's name and the detail: "device_error: cudaEventQuery returned ...".
template <class Scope>
std::string outcome_text(const basic_job_result<Scope>& r);
/// One log line for a failed job: "job 7 (store) failed: device_error: cudaEventQuery ...".
template <class Scope>
std::string failure_line(const basic_job_result<Scope>& r);

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
