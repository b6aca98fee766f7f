#include "launch/supervisor/node_run.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>

#include <spdlog/common.h>

#include "launch/process/spawned_process.hpp"
#include "launch/roles/child_events.hpp"
#include "launch/roles/node_processes.hpp"
#include "launch/supervisor/child_lines.hpp"
#include "launch/supervisor/launcher_output.hpp"
#include "launch/supervisor/process_fault_actions.hpp"
#include "launch/supervisor/progress_display.hpp"
#include "shm/segment.hpp"

namespace kvc::launch {

namespace {

using clock = std::chrono::steady_clock;
using nlohmann::json;

/// Where another node's workers reach the simulated engine's executor channel: node 0's host at
/// the fixed port (a multi-node launch has a fixed runtime.port, hence a fixed executor port).
std::string remote_executor(const launch_config& c) {
  const std::string& host = c.topology.nodes[0].host;
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" +
         std::to_string(executor_port_of(c.runtime));
}

}  // namespace

class node_run::impl {
 public:
  impl(const launch_config& config, const launch_plan& plan, uint32_t node,
       std::vector<rank_id> ranks, std::string binary, std::vector<std::string> env,
       engine_kind engine, process_fault_schedule process_faults, uint64_t fault_seed)
      : engine_(engine),
        config_(config),
        plan_(plan),
        child_config_(child_config_yaml(config, plan.scheduler.pool.instance)),
        ranks_(std::move(ranks)),
        binary_(std::move(binary)),
        env_(std::move(env)),
        children_(1 + ranks_.size()),
        buffers_(children_.size()),
        sup_(names(ranks_), std::chrono::milliseconds{config.runtime.stop_timeout_ms},
             restarts_allowed(config) ? config.topology.restart.limit : 0, node == 0,
             std::string{traits_of(engine).run_name}),
        node_(node),
        faults_(std::move(process_faults), fault_seed,
                std::chrono::milliseconds{config.runtime.connection_timeout_ms} +
                    std::chrono::milliseconds{config.runtime.stop_timeout_ms},
                fault_targets{.children = children_,
                              .ranks = ranks_,
                              .sup = sup_,
                              .role = [this](size_t child) { return role(child); },
                              .warn = [this](const std::string& m) {
                                tell(spdlog::level::warn, m);
                              },
                              .fail = [this](const std::string& m) { own_line(m); }}) {}

  /// Runs until every child is gone; the launch's exit code.
  int run(signal_watcher& signals) {
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0) {
      own_line(std::string("eventfd: ") + std::strerror(errno));
      return 1;
    }
    signals.on_signal([fd = wake_](int) {
      const uint64_t one = 1;
      (void)!::write(fd, &one, sizeof one);
    });
    if (node_ == 0) {
      if (!start(0, scheduler_arguments(engine_))) {
        signals.on_signal(nullptr);
        ::close(wake_);
        return 1;
      }
    } else {
      // The scheduler runs on node 0 at the fixed runtime.port, its executor channel at the
      // derived fixed port: the workers start at once.
      listening_event at{.port = config_.runtime.port};
      if (config_.offload.enabled) {
        at.segment = shm::segment_name(::getuid(), plan_.scheduler.pool.instance, node_);
      }
      if (traits_of(engine_).executor_channel) at.executor = remote_executor(config_);
      on_listening(at);
    }
    while (!sup_.finished()) step(signals);
    std::cerr << progress_.close() << std::flush;
    signals.on_signal(nullptr);
    ::close(wake_);
    return sup_.exit_code();
  }

  const supervision& outcome() const { return sup_; }
  /// The scheduler process this launch started (node 0); -1 when none started.
  pid_t scheduler_pid() const { return node_ == 0 ? children_[0].pid() : -1; }
  /// When the scheduler said every rank is ready (registered, or without offloading subscribed to
  /// the executor channel): its first step follows at once.
  const std::optional<clock::time_point>& ready_at() const { return ready_at_; }
  child_reports& reports() { return reports_; }
  std::optional<json> fault_report() const {
    return reports_.fault_report(faults_.tally());
  }

 private:
  /// A message of the launcher's own at `level`, shown unless runtime.log_level is above it.
  void tell(spdlog::level::level_enum level, const std::string& message, bool own = true) {
    if (level < spdlog::level::from_str(config_.runtime.log_level)) return;
    std::cerr << progress_.close();
    if (own) {
      say(message);
    } else {
      std::cerr << (message + "\n") << std::flush;  // one write
    }
  }

  /// A line of the launcher's own, after the progress line (if one is open on the terminal).
  void own_line(const std::string& message) {
    std::cerr << progress_.close();
    say(message);
  }

  /// The progress line for the scheduler's progress line (below log level info: none).
  void show_progress(const progress_event& e) {
    if (spdlog::level::info < spdlog::level::from_str(config_.runtime.log_level)) return;
    if (auto text = progress_.on_progress(e.figures, clock::now())) {
      std::cerr << *text << std::flush;
    }
  }

  static std::vector<std::string> names(const std::vector<rank_id>& ranks) {
    std::vector<std::string> out{"scheduler"};
    for (rank_id r : ranks) out.push_back("worker " + std::to_string(r));
    return out;
  }

  std::string role(size_t child) const {
    return child == 0 ? "scheduler" : "worker " + std::to_string(ranks_[child - 1]);
  }

  /// Starts `child` as `binary_ args`, the config on its stdin.
  bool start(size_t child, const std::vector<std::string>& args) {
    std::vector<std::string> argv{binary_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto p = spawned_process::start(argv, env_, child_config_);
    if (!p) {
      own_line("cannot start the " + role(child) + ": " + p.error().to_string());
      return false;
    }
    children_[child] = std::move(p).value();
    sup_.on_started(child);
    return true;
  }

  /// `forwarded`: a signal the launcher got, passed on even while the workers are left to end
  /// on their own.
  void apply(const std::vector<supervision::order>& orders, bool forwarded = false) {
    // After kill_scheduler the workers must end on their own: the launcher waits for them
    // and signals none before.
    if (faults_.workers_left_alone() && !forwarded) return;
    for (const auto& o : orders) {
      if (!children_[o.child].running()) continue;
      faults_.before_signal(o.child, o.signal);
      (void)children_[o.child].signal(o.signal);
    }
  }

  /// One poll() round: signals, output lines, exits, deadlines.
  void step(signal_watcher& signals) {
    std::vector<pollfd> fds{{wake_, POLLIN, 0}};
    std::vector<std::pair<size_t, bool>> what;  // child, true: its exit
    for (size_t i = 0; i < children_.size(); ++i) {
      if (!children_[i].running()) continue;
      if (children_[i].stdout_fd() >= 0) {
        fds.push_back({children_[i].stdout_fd(), POLLIN, 0});
        what.emplace_back(i, false);
      }
      fds.push_back({children_[i].exit_fd(), POLLIN, 0});
      what.emplace_back(i, true);
    }
    int timeout = -1;
    std::optional<clock::time_point> d = sup_.deadline();
    if (auto f = faults_.deadline(); f && (!d || *f < *d)) d = f;
    if (d) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*d - clock::now());
      timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      own_line(std::string("poll: ") + std::strerror(errno));
      apply(sup_.on_signal(SIGTERM, clock::now()));
      return;
    }
    if (fds[0].revents) {
      uint64_t n;
      (void)!::read(wake_, &n, sizeof n);
      if (int sig = signals.signalled()) {
        tell(spdlog::level::info,
             "signal " + std::to_string(sig) + ": stopping the node's processes");
        apply(sup_.on_signal(sig, clock::now()), true);
      }
    }
    for (size_t k = 0; k < what.size(); ++k) {
      if (!fds[k + 1].revents) continue;
      const auto [child, is_exit] = what[k];
      if (!is_exit) {
        read_output(child, false);
        continue;
      }
      read_output(child, true);  // what it wrote before it ended comes first
      // So does what the scheduler wrote before it: a worker without offloading ends at the
      // executor channel's end, which the scheduler sends after its run's last line.
      if (child != 0) read_written(0);
      const int code = children_[child].reap();
      faults_.on_exit(child);
      tell(spdlog::level::info, role(child) + " (pid " + std::to_string(children_[child].pid()) +
                                    ") exited with code " + std::to_string(code));
      apply(sup_.on_exit(child, code, clock::now()));
      restart_due();
    }
    faults_.on_time(clock::now());
    apply(sup_.on_time(clock::now()));
  }

  /// Starts the workers supervision decided to restart, each with its next incarnation: it
  /// re-attaches to the node's segment and registers again.
  void restart_due() {
    // A restart that cannot start counts as its failure, which may be restarted in turn.
    for (auto due = sup_.take_restarts(); !due.empty(); due = sup_.take_restarts()) {
      for (size_t child : due) restart(child);
    }
  }

  void restart(size_t child) {
    const rank_id rank = ranks_[child - 1];
    const uint32_t incarnation = sup_.incarnation(child);
    tell(spdlog::level::warn, "restarting " + role(child) + " as incarnation " +
                                  std::to_string(incarnation) + " (restart.limit " +
                                  std::to_string(config_.topology.restart.limit) + ")");
    buffers_[child].clear();  // a partial line of the process that died
    if (!start(child,
               worker_arguments(rank, static_cast<uint16_t>(port_), incarnation, executor_))) {
      apply(sup_.on_exit(child, 127, clock::now()));  // as if it had failed at once
      return;
    }
    emit({{"event", "restarted"},
          {"rank", rank},
          {"incarnation", incarnation},
          {"pid", children_[child].pid()},
          {"restarts", sup_.restarts()}});
  }

  /// Reads every line `child` has written so far, without waiting for more.
  void read_written(size_t child) {
    for (;;) {
      pollfd p{children_[child].stdout_fd(), POLLIN, 0};
      if (p.fd < 0 || ::poll(&p, 1, 0) <= 0 || p.revents == 0) return;
      read_output(child, false);
    }
  }

  /// Reads what the child wrote (all of it up to the end when `to_end`) and handles its lines.
  void read_output(size_t child, bool to_end) {
    auto& p = children_[child];
    char buf[4096];
    while (p.stdout_fd() >= 0) {
      const ssize_t n = ::read(p.stdout_fd(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        p.close_stdout();
        break;
      }
      buffers_[child].append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buffers_[child].find('\n')) != std::string::npos) {
        const std::string line = buffers_[child].substr(0, nl);
        buffers_[child].erase(0, nl + 1);
        on_line(child, line);
      }
      if (!to_end) break;
    }
  }

  void on_line(size_t child, const std::string& line) {
    const result<child_event> parsed = parse_child_line(line);
    // On stderr: a sentence at info, the raw line at debug (progress, every step, and finished,
    // a figure per request for --compare: never).
    if (spdlog::level::debug >= spdlog::level::from_str(config_.runtime.log_level)) {
      const bool per_step = parsed && (std::holds_alternative<progress_event>(*parsed) ||
                                       std::holds_alternative<finished_event>(*parsed));
      if (!per_step) tell(spdlog::level::debug, "[" + role(child) + "] " + line, false);
    } else if (auto text = child_line_text(parsed, line)) {
      tell(spdlog::level::info, "[" + role(child) + "] " + *text, false);
    }
    if (!parsed) return;
    if (child == 0) {
      on_scheduler_event(*parsed);
    } else {
      on_worker_event(*parsed);
    }
  }

  void on_worker_event(const child_event& event) {
    std::visit(
        overloaded{
            [&](const registered_event& e) {
              // A restarted worker registered again: it re-attached to the segment, rejoined.
              if (e.incarnation == 0) return;
              emit({{"event", "rejoined"},
                    {"rank", e.rank},
                    {"incarnation", e.incarnation},
                    {"pid", e.pid}});
            },
            [&](const runner_event& e) { reports_.add(e); },
            [&](const connector_steps_event& e) { reports_.add(e); },
            [&](const device_lost_event& e) {
              emit({{"event", "device_lost"},
                    {"rank", e.rank},
                    {"incarnation", e.incarnation},
                    {"detail", e.detail}});
              reports_.add_worker_fired(e.fired);
            },
            [&](const stopped_event& e) {
              if (e.fired) reports_.add_worker_fired(*e.fired);
            },
            [](const auto&) {}},
        event);
  }

  void on_scheduler_event(const child_event& event) {
    std::visit(overloaded{[&](const progress_event& e) {
                            faults_.after_step(e.step);
                            show_progress(e);
                          },
                          [&](const rank_lost_event& e) {
                            faults_.on_rank_lost(e.rank, e.incarnation);
                          },
                          [&](const listening_event& e) { on_listening(e); },
                          [&](const ready_event& e) {
                            if (!ready_at_) ready_at_ = clock::now();
                            emit({{"event", "ready"}, {"world_size", e.world_size}});
                          },
                          [&](const smoke_event& e) {
                            reports_.add(e);
                            // The scheduler prints it only when every job and check passed.
                            sup_.on_smoke(true);
                          },
                          [&](const finished_event& e) { reports_.add(e); },
                          [&](const sim_event& e) {
                            reports_.add(e);
                            sup_.on_smoke(e.ok());
                          },
                          [&](const fault_report_event& e) { reports_.add(e); },
                          [](const auto&) {}},
               event);
  }

  void on_listening(const listening_event& e) {
    if (!sup_.start_workers()) return;
    port_ = static_cast<int>(e.port);
    executor_ = e.executor;
    json pids = json::array();
    for (size_t k = 0; k < ranks_.size(); ++k) {
      if (!start(k + 1, worker_arguments(ranks_[k], static_cast<uint16_t>(port_), 0, executor_))) {
        apply(sup_.on_exit(k + 1, 127, clock::now()));  // as if it had failed at once
        if (sup_.stopping()) return;
        continue;  // restarted below
      }
      pids.push_back(children_[k + 1].pid());
    }
    restart_due();
    emit({{"event", "started"},
          {"node", node_},
          {"port", port_},
          {"segment", e.segment.empty() ? json() : json(e.segment)},  // none: no offloading
          {"scheduler_pid", node_ == 0 ? json(children_[0].pid()) : json()},
          {"ranks", ranks_},
          {"worker_pids", pids}});
  }

  engine_kind engine_;
  const launch_config& config_;
  const launch_plan& plan_;
  std::string child_config_;  ///< what every child reads on its stdin (child_config_yaml)
  std::vector<rank_id> ranks_;
  std::string binary_;
  std::vector<std::string> env_;
  std::vector<spawned_process> children_;  ///< 0: the scheduler; k + 1: ranks_[k]
  std::vector<std::string> buffers_;       ///< a partial stdout line per child
  supervision sup_;
  uint32_t node_;
  int wake_ = -1;
  int port_ = 0;
  std::string executor_;  ///< the simulated engine's executor channel (its "listening" line)
  std::optional<clock::time_point> ready_at_;
  child_reports reports_{ranks_};  ///< what the children reported
  process_fault_actions faults_;  ///< the config's process faults on the children
  progress_display progress_{::isatty(STDERR_FILENO) == 1,
                            std::chrono::milliseconds{config_.runtime.progress_interval_ms}};
};

node_run::node_run(const launch_config& config, const launch_plan& plan, uint32_t node,
                   std::vector<rank_id> ranks, std::string binary, std::vector<std::string> env,
                   engine_kind engine, process_fault_schedule process_faults, uint64_t fault_seed)
    : impl_(std::make_unique<impl>(config, plan, node, std::move(ranks), std::move(binary),
                                   std::move(env), engine, std::move(process_faults),
                                   fault_seed)) {}

node_run::~node_run() = default;

int node_run::run(signal_watcher& signals) {
  return impl_->run(signals);
}

const supervision& node_run::outcome() const {
  return impl_->outcome();
}

pid_t node_run::scheduler_pid() const {
  return impl_->scheduler_pid();
}

const std::optional<clock::time_point>& node_run::ready_at() const {
  return impl_->ready_at();
}

child_reports& node_run::reports() {
  return impl_->reports();
}

std::optional<json> node_run::fault_report() const {
  return impl_->fault_report();
}

}  // namespace kvc::launch
