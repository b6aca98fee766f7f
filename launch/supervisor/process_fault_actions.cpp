#include "launch/supervisor/process_fault_actions.hpp"

#include <algorithm>
#include <csignal>

#include "launch/supervisor/launcher_output.hpp"

namespace kvc::launch {

process_fault_actions::process_fault_actions(process_fault_schedule schedule, uint64_t seed,
                                             std::chrono::milliseconds orphan_wait,
                                             fault_targets targets)
    : schedule_(std::move(schedule)),
      seed_(seed),
      orphan_wait_(orphan_wait),
      t_(std::move(targets)),
      stopped_(t_.children.size(), false) {}

size_t process_fault_actions::child_of(rank_id rank) const {
  return 1 + static_cast<size_t>(std::find(t_.ranks.begin(), t_.ranks.end(), rank) -
                                 t_.ranks.begin());
}

void process_fault_actions::after_step(step_id step) {
  auto& children = t_.children;
  for (const process_action& a : schedule_.due(step)) {
    const std::string kind(to_string(kind_of(a)));
    const size_t child = a.action == process_action::what::kill_scheduler ? 0 : child_of(a.rank);
    if (child >= children.size() || !children[child].running() || t_.sup.stopping()) {
      t_.warn("fault " + kind + " at step " + std::to_string(step) + ": " + t_.role(child) +
              " is not running; not fired");
      continue;
    }
    const int sig = a.action == process_action::what::stop_rank ? SIGSTOP : SIGKILL;
    if (auto st = children[child].signal(sig); !st) {
      t_.fail("fault " + kind + ": " + st.to_string());
      continue;
    }
    ++fired_[static_cast<size_t>(kind_of(a))];
    const uint32_t incarnation = child == 0 ? 0 : t_.sup.incarnation(child);
    if (a.action == process_action::what::stop_rank) {
      stopped_[child] = true;
      if (a.resume_ms) {
        resumes_.push_back(
            {clock::now() + std::chrono::milliseconds{*a.resume_ms}, child, incarnation});
      }
    }
    if (a.action == process_action::what::kill_scheduler) {
      scheduler_killed_ = true;
      orphan_deadline_ = clock::now() + orphan_wait_;
    }
    t_.warn("fault " + kind + ": " + (sig == SIGSTOP ? "SIGSTOP" : "SIGKILL") + " to the " +
            t_.role(child) + " (pid " + std::to_string(children[child].pid()) + ") after step " +
            std::to_string(step) +
            (a.action == process_action::what::stop_rank
                 ? (a.resume_ms ? ", SIGCONT in " + std::to_string(*a.resume_ms) + " ms"
                                : ", never continued")
                 : ""));
    nlohmann::json line{{"event", "fault"},
                        {"kind", kind},
                        {"step", step},
                        {"pid", children[child].pid()}};
    if (child != 0) {
      line["rank"] = a.rank;
      line["incarnation"] = incarnation;
    }
    emit(line);
  }
}

void process_fault_actions::on_rank_lost(rank_id rank, uint32_t incarnation) {
  const size_t child = child_of(rank);
  auto& children = t_.children;
  if (child >= children.size() || !stopped_[child] || !children[child].running()) return;
  if (t_.sup.incarnation(child) != incarnation) return;
  t_.warn("the scheduler lost the stopped " + t_.role(child) + ": SIGKILL");
  (void)children[child].signal(SIGKILL);
}

void process_fault_actions::on_time(clock::time_point now) {
  auto& children = t_.children;
  for (auto it = resumes_.begin(); it != resumes_.end();) {
    if (it->at > now) {
      ++it;
      continue;
    }
    if (stopped_[it->child] && children[it->child].running() &&
        t_.sup.incarnation(it->child) == it->incarnation) {
      t_.warn("fault hang_rank: SIGCONT to the " + t_.role(it->child));
      (void)children[it->child].signal(SIGCONT);
      stopped_[it->child] = false;
    }
    it = resumes_.erase(it);
  }
  if (orphan_deadline_ && *orphan_deadline_ <= now) {
    orphan_deadline_.reset();
    for (size_t i = 1; i < children.size(); ++i) {
      if (!children[i].running()) continue;
      workers_killed_ = true;
      t_.fail("the " + t_.role(i) +
              " did not exit within connection_timeout_ms + stop_timeout_ms of the scheduler's "
              "death: SIGKILL");
      (void)children[i].signal(SIGKILL);
    }
  }
}

std::optional<process_fault_actions::clock::time_point> process_fault_actions::deadline() const {
  std::optional<clock::time_point> d = orphan_deadline_;
  for (const auto& r : resumes_) {
    if (!d || r.at < *d) d = r.at;
  }
  return d;
}

void process_fault_actions::before_signal(size_t child, int sig) {
  if (!stopped_[child] || sig == SIGKILL) return;
  (void)t_.children[child].signal(SIGCONT);  // a stopped child could not act on it
  stopped_[child] = false;
}

process_fault_tally process_fault_actions::tally() const {
  return {.scheduled = !schedule_.empty(),
          .seed = seed_,
          .fired = fired_,
          .scheduler_killed = scheduler_killed_,
          .workers_killed = workers_killed_};
}

}  // namespace kvc::launch
