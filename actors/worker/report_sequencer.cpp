#include "actors/worker/report_sequencer.hpp"

#include <string>
#include <utility>

namespace kvc::worker {

status report_sequencer::open(step_id step) {
  if (open_) {
    return make_error(errc::precondition_failed,
                      "step " + std::to_string(*open_) + " is still bound; clear it first");
  }
  if (last_ && step <= *last_) {
    return make_error(
        errc::invalid_argument,
        "step " + std::to_string(step) + " is not above the last step " + std::to_string(*last_));
  }
  open_ = step;
  last_ = step;
  sent_ = false;
  return {};
}

std::optional<step_report> report_sequencer::add(std::vector<rank_job_result> jobs) {
  held_.insert(held_.end(), std::make_move_iterator(jobs.begin()),
               std::make_move_iterator(jobs.end()));
  if (!open_ || sent_) return std::nullopt;
  sent_ = true;
  return release(*open_);
}

step_report report_sequencer::release(step_id step) {
  step_report r{stamper_.rank(), stamper_.incarnation(), step, stamper_.stamp(step, held_)};
  held_.clear();
  return r;
}

std::optional<step_report> report_sequencer::close() {
  if (!open_) return std::nullopt;
  const step_id step = *open_;
  open_.reset();
  if (sent_) return std::nullopt;
  sent_ = true;
  return release(step);
}

}  // namespace kvc::worker
