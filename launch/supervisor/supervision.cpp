#include "launch/supervisor/supervision.hpp"

#include <algorithm>
#include <csignal>
#include <string>
#include <utility>

namespace kvc::launch {

supervision::supervision(std::vector<std::string> names, std::chrono::milliseconds grace,
                         uint32_t restart_limit, bool scheduler_here, std::string run)
    : names_(std::move(names)),
      children_(names_.size(), state::idle),
      restarted_(names_.size(), 0),
      grace_(grace),
      restart_limit_(restart_limit),
      scheduler_here_(scheduler_here),
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
  if (!scheduler_here_ && code == 0) {
    smoke_seen_ = smoke_passed_ = true;  // the scheduler elsewhere stopped its workers: the end
    const bool all_gone = std::none_of(children_.begin() + 1, children_.end(), [](state s) {
      return s == state::running || s == state::restarting;
    });
    if (all_gone) return stop(0, "the scheduler stopped the node's workers", false, SIGTERM, now);
    return {};
  }
  if (code != 0 || !smoke_seen_) {
    // Exit code 2: the worker's registration or set-up was refused (kvconnect worker): the
    // same command would be refused again.
    if (!smoke_seen_ && code != refused_exit_code && restarted_[child] < restart_limit_) {
      ++restarted_[child];
      ++restarts_total_;
      children_[child] = state::restarting;
      due_.push_back(child);
      return {};
    }
    std::string why = who + " exited with code " + std::to_string(code);
    if (!smoke_seen_) why += " before the " + run_ + " ended";
    if (!smoke_seen_ && restart_limit_ > 0) {
      why += code == refused_exit_code
                 ? " (refused: not restarted)"
                 : " (restart.limit " + std::to_string(restart_limit_) + " reached)";
    }
    return stop(1, std::move(why), true, SIGTERM, now);
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

std::vector<size_t> supervision::take_restarts() {
  if (stopping_) return {};
  return std::exchange(due_, {});
}

uint32_t supervision::incarnation(size_t child) const {
  return child < restarted_.size() ? restarted_[child] : 0;
}

bool supervision::finished() const {
  return stopping_ && std::none_of(children_.begin(), children_.end(),
                                   [](state s) { return s == state::running; });
}

std::vector<supervision::order> supervision::stop(int code, std::string reason, bool terminate,
                                                  int signal, time_point now) {
  stopping_ = true;
  for (size_t child : std::exchange(due_, {})) children_[child] = state::exited;
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
