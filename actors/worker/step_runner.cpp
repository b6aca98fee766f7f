#include "actors/worker/step_runner.hpp"

#include <string>
#include <utility>

namespace kvc::worker {

status step_runner::execute(const connector_metadata& meta, std::vector<step_report>& reports) {
  if (last_ && meta.step <= *last_) {
    return make_error(errc::invalid_argument, "step " + std::to_string(meta.step) +
                                                  " is not above the last step " +
                                                  std::to_string(*last_));
  }
  if (open_) reports.push_back(close());
  open_ = last_ = meta.step;
  status first;
  auto note = [&first](status st) {
    if (first.ok() && !st.ok()) first = std::move(st);
  };
  if (status bound = worker_->bind_connector_metadata(meta); bound.ok()) {
    note(worker_->handle_preemptions());
    note(worker_->start_load_kv());
    note(worker_->wait_for_save());
    worker_->submit_deferred_stores();
    worker_->clear_connector_metadata();
  } else {
    note(std::move(bound));
  }
  if (auto r = poll()) reports.push_back(std::move(*r));
  return first;
}

std::optional<step_report> step_runner::poll() {
  if (!open_) return std::nullopt;
  collect();
  if (worker_->transfers_in_flight() > 0 || worker_->queued_stores() > 0) return std::nullopt;
  return close();
}

void step_runner::collect() {
  worker_output out = worker_->get_finished({});
  load_error_blocks_ += worker_->get_block_ids_with_load_errors().size();
  auto events = stamper_.stamp(*open_, out.jobs);
  pending_.insert(pending_.end(), std::make_move_iterator(events.begin()),
                  std::make_move_iterator(events.end()));
}

step_report step_runner::close() {
  collect();
  step_report r{*open_, std::move(pending_)};
  pending_.clear();
  open_.reset();
  return r;
}

}  // namespace kvc::worker
