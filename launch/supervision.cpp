#include "launch/supervision.hpp"

#include <algorithm>
#include <csignal>

namespace kvc::launch {

supervision::supervision(std::vector<std::string> names, std::chrono::milliseconds grace,
                         std::string run)
    : names_(std::move(names)),
      children_(names_.size(), state::idle),
      grace_(grace),
      run_(std::move(run)) {}

void supervision::on_started(size_t child) {
  if (child < children_.size()) children_[child] = state::running;
}

void supervision::on_smoke(bool passed) {
  smoke_seen_ = true;
  smoke_passed_ = passed;
}

std::vector<supervision::order> supervision::on_exit(size_t child, int code, time_point now) {
  if (child >= children_.size()) return {};
  children_[child] = state::exited;
  if (stopping_) return {};
  const std::string& who = names_[child];
  if (child == 0) {
    if (code == 0 && smoke_passed_) return stop(0, "the " + run_ + " passed", false, SIGTERM, now);
    return stop(1,
                who + " exited with code " + std::to_string(code) +
                    (smoke_seen_ ? "" : " before its " + run_ + " ended"),
                true, SIGTERM, now);
  }
  if (code != 0 || !smoke_seen_) {
    return stop(1,
                who + " exited with code " + std::to_string(code) +
                    (smoke_seen_ ? "" : " before the " + run_ + " ended"),
                true, SIGTERM, now);
  }
  return {};  // stopped by the scheduler after the smoke run
}

std::vector<supervision::order> supervision::on_signal(int signal, time_point now) {
  if (stopping_) return killed_ ? std::vector<order>{} : signal_running(signal);
  return stop(128 + signal, "signal " + std::to_string(signal), true, signal, now);
}

std::vector<supervision::order> supervision::on_time(time_point now) {
  if (!deadline_ || now < *deadline_) return {};
  if (!terminated_) {
    terminated_ = true;
    deadline_ = now + grace_;
    return signal_running(SIGTERM);
  }
  deadline_.reset();
  if (killed_) return {};
  killed_ = true;
  return signal_running(SIGKILL);
}

bool supervision::finished() const {
  return stopping_ && std::none_of(children_.begin(), children_.end(),
                                   [](state s) { return s == state::running; });
}

std::vector<supervision::order> supervision::stop(int code, std::string reason, bool terminate,
                                                  int signal, time_point now) {
  stopping_ = true;
  exit_code_ = code;
  reason_ = std::move(reason);
  deadline_ = now + grace_;
  if (!terminate) return {};
  terminated_ = true;
  return signal_running(signal);
}

std::vector<supervision::order> supervision::signal_running(int signal) {
  std::vector<order> out;
  for (size_t i = 0; i < children_.size(); ++i) {
    if (children_[i] == state::running) out.push_back({i, signal});
  }
  return out;
}

}  // namespace kvc::launch
