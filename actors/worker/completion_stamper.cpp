#include "actors/worker/completion_stamper.hpp"

namespace kvc::worker {

std::vector<completion_event> completion_stamper::stamp(step_id step,
                                                        std::span<const rank_job_result> jobs) {
  std::vector<completion_event> out;
  out.reserve(jobs.size());
  for (const rank_job_result& j : jobs) {
    out.push_back({.rank = rank_,
                   .incarnation = incarnation_,
                   .seq = next_seq_++,
                   .step = step,
                   .job = j.job,
                   .kind = j.kind,
                   .ok = j.ok,
                   .error = j.error,
                   .bytes = j.bytes,
                   .seconds = j.seconds,
                   .detail = clip_detail(j.detail)});
  }
  return out;
}

}  // namespace kvc::worker
