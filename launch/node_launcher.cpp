#include "launch/node_launcher.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <random>

#include <spdlog/common.h>
#include <nlohmann/json.hpp>

#include "launch/child_lines.hpp"
#include "launch/config_file.hpp"
#include "launch/launch_plan.hpp"
#include "launch/launch_summary.hpp"
#include "launch/fault_options.hpp"
#include "launch/fault_report.hpp"
#include "launch/node_processes.hpp"
#include "launch/observe_dirs.hpp"
#include "launch/tier_dirs.hpp"
#include "launch/sim_engine/in_process_run.hpp"
#include "launch/sim_engine/run_comparison.hpp"
#include "launch/sim_engine/run_report.hpp"
#include "launch/process_faults.hpp"
#include "launch/progress_display.hpp"
#include "launch/signal_watcher.hpp"
#include "launch/slowest_rank_sum.hpp"
#include "launch/spawned_process.hpp"
#include "launch/supervision.hpp"
#include "shm/segment.hpp"
#include "shm/stale_segments.hpp"

extern char** environ;

namespace kvc::launch {

namespace {

using clock = std::chrono::steady_clock;
using nlohmann::json;

const std::string who = "kvconnect launch";

void emit(const json& line) {
  std::cout << line.dump() << std::endl;
}

void say(const std::string& message) {
  std::cerr << (who + ": " + message + "\n") << std::flush;
}

std::string generate_token() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  const uint64_t w = (uint64_t{rd()} << 32) ^ rd();
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(w));
  return buf;
}

/// The launcher's environment with KVCONNECT_TOKEN and SPDLOG_LEVEL (runtime.log_level) set.
std::vector<std::string> child_environment(const std::string& token, const std::string& level) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KVCONNECT_TOKEN=", 16) != 0 &&
        std::strncmp(*e, "SPDLOG_LEVEL=", 13) != 0) {
      env.emplace_back(*e);
    }
  }
  env.push_back("KVCONNECT_TOKEN=" + token);
  env.push_back("SPDLOG_LEVEL=" + level);
  return env;
}

/// Where another node's workers reach the simulated engine's executor channel: node 0's host at
/// the fixed port (a multi-node launch has a fixed runtime.port, hence a fixed executor port).
std::string remote_executor(const launch_config& c) {
  const std::string& host = c.topology.nodes[0].host;
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" +
         std::to_string(executor_port_of(c.runtime));
}

/// One node's processes and what they said.
class node_run {
 public:
  /// `node`: the node this launch runs; the scheduler runs on node 0 only. `sim_engine`: the
  /// scheduler runs the simulated engine, else the smoke run.
  node_run(const launch_config& config, const launch_plan& plan, uint32_t node,
           std::vector<rank_id> ranks, std::string binary, std::vector<std::string> env,
           bool sim_engine, process_fault_schedule process_faults, uint64_t fault_seed)
      : sim_engine_(sim_engine),
        config_(config),
        plan_(plan),
        ranks_(std::move(ranks)),
        binary_(std::move(binary)),
        env_(std::move(env)),
        children_(1 + ranks_.size()),
        buffers_(children_.size()),
        sup_(names(ranks_), std::chrono::milliseconds{config.runtime.stop_timeout_ms},
             restarts_allowed(config) ? config.topology.restart.limit : 0, node == 0,
             sim_engine ? "simulated run" : "smoke run"),
        node_(node),
        process_faults_(std::move(process_faults)),
        fault_seed_(fault_seed),
        stopped_(children_.size(), false) {}

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
      std::vector<std::string> argv{binary_};
      for (auto& a : scheduler_arguments(config_, plan_, sim_engine_)) argv.push_back(std::move(a));
      if (!start(0, argv)) {
        signals.on_signal(nullptr);
        ::close(wake_);
        return 1;
      }
    } else {
      // The scheduler runs on node 0 at the fixed runtime.port, its executor channel at the
      // derived fixed port: the workers start at once.
      json at{{"port", config_.runtime.port},
              {"segment", shm::segment_name(::getuid(), plan_.scheduler.pool.instance, node_)}};
      if (sim_engine_) at["executor"] = remote_executor(config_);
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
  const std::optional<json>& smoke() const { return smoke_; }
  /// When the scheduler said every rank registered (its first step follows at once).
  const std::optional<clock::time_point>& ready_at() const { return ready_at_; }
  const std::optional<json>& sim() const { return sim_; }
  /// The scheduler's "finished" line: the simulated run's finished requests (--compare).
  const std::optional<json>& finished() const { return finished_; }
  /// The run's fault report: the scheduler's line (channel faults, the coordinator's counts)
  /// with the workers' copy faults added to `fired`; none without the scheduler's line.
  std::optional<json> fault_report() const {
    std::optional<json> own;
    if (!fault_report_ && !process_faults_.empty()) {
      // The scheduler was killed (or failed) before its report: the launcher's counts only.
      own = json::parse(fault_report_line(fault_outcome{.seed = fault_seed_}));
    }
    if (!fault_report_ && !own) return std::nullopt;
    json merged = fault_report_ ? *fault_report_ : *own;
    for (size_t k = 0; k < fault_kind_count; ++k) {
      if (process_fired_[k] == 0) continue;
      const std::string kind(to_string(static_cast<fault_kind>(k)));
      merged["fired"][kind] = merged["fired"].value(kind, uint64_t{0}) + process_fired_[k];
    }
    if (scheduler_killed_) {
      // Invariant of kill_scheduler: the workers noticed the lost scheduler and exited.
      merged["workers_exited_on_their_own"] = !workers_killed_;
      if (workers_killed_) merged["invariants_ok"] = false;
    }
    for (const auto& [kind, n] : worker_fired_) {
      if (merged["fired"].contains(kind) && merged["fired"][kind].is_number_unsigned()) {
        merged["fired"][kind] = merged["fired"][kind].get<uint64_t>() + n;
      }
    }
    return merged;
  }
  const std::vector<json>& runners() const { return runners_; }
  /// Each step's slowest rank of this node, summed over the steps (the workers'
  /// "connector_steps" lines), once the run ended.
  double rank_connector_ns() {
    slowest_.finish();
    return slowest_.total_ns();
  }

 private:
  /// A worker's {"event":"connector_steps","rank":r,"ns":[[step,ns],...]}.
  void add_connector_steps(const json& j) {
    const json steps = j.value("ns", json::array());
    if (!steps.is_array()) return;
    const rank_id rank = j.value("rank", rank_id{0});
    for (const auto& s : steps) {
      if (s.is_array() && s.size() == 2 && s[0].is_number_unsigned() &&
          s[1].is_number_unsigned()) {
        slowest_.add(rank, s[0].get<step_id>(), s[1].get<uint64_t>());
      }
    }
  }

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

  /// The progress line for the scheduler's progress line `j` (below log level info: none).
  void show_progress(const json& j) {
    if (spdlog::level::info < spdlog::level::from_str(config_.runtime.log_level)) return;
    if (auto text = progress_.on_progress(j, clock::now())) std::cerr << *text << std::flush;
  }

  static std::vector<std::string> names(const std::vector<rank_id>& ranks) {
    std::vector<std::string> out{"scheduler"};
    for (rank_id r : ranks) out.push_back("worker " + std::to_string(r));
    return out;
  }

  std::string role(size_t child) const {
    return child == 0 ? "scheduler" : "worker " + std::to_string(ranks_[child - 1]);
  }

  bool start(size_t child, const std::vector<std::string>& argv) {
    auto p = spawned_process::start(argv, env_);
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
    // (orphan_deadline_) and signals none before.
    if (orphan_deadline_ && !forwarded) return;
    for (const auto& o : orders) {
      if (!children_[o.child].running()) continue;
      if (stopped_[o.child] && o.signal != SIGKILL) {
        (void)children_[o.child].signal(SIGCONT);  // a stopped child could not act on it
        stopped_[o.child] = false;
      }
      (void)children_[o.child].signal(o.signal);
    }
  }

  size_t child_of(rank_id rank) const {
    return 1 + static_cast<size_t>(std::find(ranks_.begin(), ranks_.end(), rank) - ranks_.begin());
  }

  /// Carries out the process faults due once the scheduler completed `step`.
  void fire_process_faults(step_id step) {
    for (const process_action& a : process_faults_.due(step)) {
      const size_t child = a.action == process_action::what::kill_scheduler ? 0 : child_of(a.rank);
      if (child >= children_.size() || !children_[child].running() || sup_.stopping()) {
        tell(spdlog::level::warn, "fault " + std::string(to_string(kind_of(a))) + " at step " +
                                      std::to_string(step) + ": " + role(child) +
                                      " is not running; not fired");
        continue;
      }
      const int sig = a.action == process_action::what::stop_rank ? SIGSTOP : SIGKILL;
      if (auto st = children_[child].signal(sig); !st) {
        own_line("fault " + std::string(to_string(kind_of(a))) + ": " + st.to_string());
        continue;
      }
      ++process_fired_[static_cast<size_t>(kind_of(a))];
      const uint32_t incarnation = child == 0 ? 0 : sup_.incarnation(child);
      if (a.action == process_action::what::stop_rank) {
        stopped_[child] = true;
        if (a.resume_ms) {
          resumes_.push_back(
              {clock::now() + std::chrono::milliseconds{*a.resume_ms}, child, incarnation});
        }
      }
      if (a.action == process_action::what::kill_scheduler) {
        scheduler_killed_ = true;
        orphan_deadline_ = clock::now() +
                           std::chrono::milliseconds{config_.runtime.connection_timeout_ms} +
                           std::chrono::milliseconds{config_.runtime.stop_timeout_ms};
      }
      tell(spdlog::level::warn,
           "fault " + std::string(to_string(kind_of(a))) + ": " +
               (sig == SIGSTOP ? "SIGSTOP" : "SIGKILL") + " to the " + role(child) + " (pid " +
               std::to_string(children_[child].pid()) + ") after step " + std::to_string(step) +
               (a.action == process_action::what::stop_rank
                    ? (a.resume_ms ? ", SIGCONT in " + std::to_string(*a.resume_ms) + " ms"
                                   : ", never continued")
                    : ""));
      json line{{"event", "fault"},
                {"kind", to_string(kind_of(a))},
                {"step", step},
                {"pid", children_[child].pid()}};
      if (child != 0) {
        line["rank"] = a.rank;
        line["incarnation"] = incarnation;
      }
      emit(line);
    }
  }

  /// The scheduler declared `rank`'s `incarnation` lost: a process stopped for good is killed
  /// (and, under on-failure, restarted like any failed worker).
  void on_rank_lost(rank_id rank, uint32_t incarnation) {
    const size_t child = child_of(rank);
    if (child >= children_.size() || !stopped_[child] || !children_[child].running()) return;
    if (sup_.incarnation(child) != incarnation) return;
    tell(spdlog::level::warn, "the scheduler lost the stopped " + role(child) + ": SIGKILL");
    (void)children_[child].signal(SIGKILL);
  }

  /// SIGCONT to hung workers whose resume time came; after kill_scheduler, SIGKILL to the
  /// workers still there at the orphan deadline.
  void on_fault_time(clock::time_point now) {
    for (auto it = resumes_.begin(); it != resumes_.end();) {
      if (it->at > now) {
        ++it;
        continue;
      }
      if (stopped_[it->child] && children_[it->child].running() &&
          sup_.incarnation(it->child) == it->incarnation) {
        tell(spdlog::level::warn, "fault hang_rank: SIGCONT to the " + role(it->child));
        (void)children_[it->child].signal(SIGCONT);
        stopped_[it->child] = false;
      }
      it = resumes_.erase(it);
    }
    if (orphan_deadline_ && *orphan_deadline_ <= now) {
      orphan_deadline_.reset();
      for (size_t i = 1; i < children_.size(); ++i) {
        if (!children_[i].running()) continue;
        workers_killed_ = true;
        own_line("the " + role(i) +
            " did not exit within connection_timeout_ms + stop_timeout_ms of the scheduler's "
            "death: SIGKILL");
        (void)children_[i].signal(SIGKILL);
      }
    }
  }

  std::optional<clock::time_point> fault_deadline() const {
    std::optional<clock::time_point> d = orphan_deadline_;
    for (const auto& r : resumes_) {
      if (!d || r.at < *d) d = r.at;
    }
    return d;
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
    if (auto f = fault_deadline(); f && (!d || *f < *d)) d = f;
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
      const int code = children_[child].reap();
      stopped_[child] = false;
      tell(spdlog::level::info, role(child) + " (pid " + std::to_string(children_[child].pid()) +
                                    ") exited with code " + std::to_string(code));
      apply(sup_.on_exit(child, code, clock::now()));
      restart_due();
    }
    on_fault_time(clock::now());
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
    std::vector<std::string> argv{binary_};
    for (auto& a :
         worker_arguments(config_, plan_, rank, static_cast<uint16_t>(port_), incarnation,
                          executor_)) {
      argv.push_back(std::move(a));
    }
    buffers_[child].clear();  // a partial line of the process that died
    if (!start(child, argv)) {
      apply(sup_.on_exit(child, 127, clock::now()));  // as if it had failed at once
      return;
    }
    emit({{"event", "restarted"},
          {"rank", rank},
          {"incarnation", incarnation},
          {"pid", children_[child].pid()},
          {"restarts", sup_.restarts()}});
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
    const json j = json::parse(line, nullptr, false);
    const std::string event = j.is_object() ? j.value("event", "") : "";
    // On stderr: a sentence at info, the raw line at debug (progress, every step, and finished,
    // a figure per request for --compare: never).
    if (spdlog::level::debug >= spdlog::level::from_str(config_.runtime.log_level)) {
      if (event != "progress" && event != "finished") {
        tell(spdlog::level::debug, "[" + role(child) + "] " + line, false);
      }
    } else if (auto text = child_line_text(j, line)) {
      tell(spdlog::level::info, "[" + role(child) + "] " + *text, false);
    }
    if (event.empty()) return;
    if (child != 0) {
      // A restarted worker registered again: it re-attached to the segment and rejoined.
      if (event == "registered" && j.value("incarnation", 0) > 0) {
        emit({{"event", "rejoined"},
              {"rank", j.value("rank", 0)},
              {"incarnation", j.value("incarnation", 0)},
              {"pid", j.value("pid", 0)}});
      }
      if (event == "runner") runners_.push_back(j);
      if (event == "connector_steps") add_connector_steps(j);
      if (event == "device_lost") {
        emit({{"event", "device_lost"},
              {"rank", j.value("rank", 0)},
              {"incarnation", j.value("incarnation", 0)},
              {"detail", j.value("detail", "")}});
      }
      // A worker's last line: its copy faults, counted once per incarnation.
      if ((event == "stopped" || event == "device_lost") && j.contains("fired") &&
          j["fired"].is_object()) {
        for (const auto& [kind, n] : j["fired"].items()) {
          if (n.is_number_unsigned()) worker_fired_[kind] += n.get<uint64_t>();
        }
      }
      return;
    }
    if (event == "progress") {
      fire_process_faults(j.value("step", step_id{0}));
      show_progress(j);
    } else if (event == "rank_lost") {
      on_rank_lost(j.value("rank", rank_id{0}), j.value("incarnation", uint32_t{0}));
    } else if (event == "listening") {
      on_listening(j);
    } else if (event == "ready") {
      if (!ready_at_) ready_at_ = clock::now();
      emit({{"event", "ready"}, {"world_size", j.value("world_size", 0)}});
    } else if (event == "smoke") {
      smoke_ = j;
      sup_.on_smoke(true);  // the scheduler prints it only when every job and check passed
    } else if (event == "finished") {
      finished_ = j;
    } else if (event == "sim") {
      sim_ = j;
      sup_.on_smoke(j.value("ok", false));
    } else if (event == "fault_report") {
      fault_report_ = j;
    }
  }

  void on_listening(const json& j) {
    if (!sup_.start_workers()) return;
    port_ = j.value("port", 0);
    executor_ = j.value("executor", "");
    json pids = json::array();
    for (size_t k = 0; k < ranks_.size(); ++k) {
      std::vector<std::string> argv{binary_};
      for (auto& a :
           worker_arguments(config_, plan_, ranks_[k], static_cast<uint16_t>(port_), 0, executor_)) {
        argv.push_back(std::move(a));
      }
      if (!start(k + 1, argv)) {
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
          {"segment", j.value("segment", "")},
          {"scheduler_pid", node_ == 0 ? json(children_[0].pid()) : json()},
          {"ranks", ranks_},
          {"worker_pids", pids}});
  }

  bool sim_engine_;
  const launch_config& config_;
  const launch_plan& plan_;
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
  std::optional<json> smoke_;
  std::optional<clock::time_point> ready_at_;
  std::optional<json> sim_;
  std::optional<json> finished_;
  std::vector<json> runners_;  ///< the workers' "runner" lines
  slowest_rank_sum slowest_{ranks_};  ///< the workers' "connector_steps" lines
  std::optional<json> fault_report_;             ///< the scheduler's fault_report line
  std::map<std::string, uint64_t> worker_fired_;  ///< copy faults from the workers' "stopped"
  process_fault_schedule process_faults_;
  uint64_t fault_seed_;
  fault_counts process_fired_{};  ///< process faults carried out, by kind
  std::vector<bool> stopped_;     ///< per child: SIGSTOPped and not continued
  struct resume {
    clock::time_point at;
    size_t child;
    uint32_t incarnation;
  };
  std::vector<resume> resumes_;  ///< hang_rank with resume=MS: SIGCONT due
  bool scheduler_killed_ = false;
  /// kill_scheduler: until then the workers must exit on their own; past it they are killed.
  std::optional<clock::time_point> orphan_deadline_;
  bool workers_killed_ = false;  ///< a worker outlived orphan_deadline_
  progress_display progress_{::isatty(STDERR_FILENO) == 1,
                            std::chrono::milliseconds{config_.runtime.progress_interval_ms}};
};

/// Removes the segments earlier runs of this user left behind (their creator is gone); prints
/// {"event":"cleanup","removed":[...]} when there were any.
void sweep_stale_segments(const std::string& log_level) {
  auto sweep = shm::remove_stale_segments(::getuid());
  if (!sweep) {
    say("cannot look for stale segments: " + sweep.error().to_string());
    return;
  }
  for (const auto& p : sweep->problems) say(p);
  if (sweep->removed.empty()) return;
  json names = json::array();
  for (const auto& r : sweep->removed) {
    names.push_back(r.name);
    if (spdlog::level::from_str(log_level) <= spdlog::level::warn) {
      say("removed " + r.name + ", left by an earlier run (creator pid " +
          std::to_string(r.creator) + " is gone)");
    }
  }
  emit({{"event", "cleanup"}, {"removed", names}});
}

/// `--compare`: the same workload without offloading, in this process (the reference run of
/// `soak --compare`), compared over the requests finished in both runs (`finished`: the
/// scheduler's "finished" line); its table and the comparison's on stderr, the "compare" line
/// to print. None (with the error said) when the scheduler's finished requests are missing or
/// unreadable, or the reference run could not start.
std::optional<json> compare_without_offload(const launch_config& c, const json& summary,
                                            const std::optional<json>& finished) {
  if (!finished) {
    say("--compare: the scheduler did not list its finished requests");
    return std::nullopt;
  }
  auto on = sim::finished_from_json(*finished);
  if (!on) {
    say("--compare: " + on.error().to_string());
    return std::nullopt;
  }
  sim::in_process_options reference;
  reference.config = c;
  reference.instance = "launch-compare-" + std::to_string(::getpid());
  auto off = sim::run_without_offload(reference);
  if (!off) {
    say("--compare: the run without offloading: " + off.error().to_string());
    return std::nullopt;
  }
  const json off_line = sim::summary_json(*off);
  const sim::run_comparison compared = sim::compare_finished(*on, off->finished);
  std::cerr << (sim::summary_table(*off) + sim::compare_table(summary, off_line, compared))
            << std::flush;
  return sim::compare_json(summary, off_line, compared);
}

}  // namespace

int run_launch(const launch_options& o) {
  const auto t0 = clock::now();
  auto loaded = load_config_file(o.file, o.overrides);
  if (!loaded.ok()) {
    print_config_errors(loaded, "launch");
    say("nothing started");
    return 2;
  }
  const launch_config& c = loaded.config;
  const size_t nodes = c.topology.nodes.size();
  auto refuse = [](const std::string& why) {
    say(why + "; nothing started");
    return 2;
  };
  if (o.node >= nodes) {
    return refuse("--node " + std::to_string(o.node) + ": topology.nodes has " +
                  std::to_string(nodes) + (nodes == 1 ? " node" : " nodes"));
  }
  if (!c.offload.enabled) {
    return refuse(
        "offload.enabled is false: a launch needs the pool (`kvconnect soak --compare` runs the "
        "simulated engine without offloading)");
  }
  if (o.engine != "sim" && o.engine != "smoke") {
    return refuse("--engine " + o.engine + ": sim or smoke");
  }
  // The engine of a launch waits for each step's output: a lost report must fail its jobs at
  // their deadline before that wait ends (check_config refuses a wait shorter than the
  // deadline; here also no deadline by time, which only the in-process soak can do without).
  if (auto p = step_wait_problem(c.runtime.step_timeout_ms, c.runtime.job_timeout_ms,
                                 "runtime.step_timeout_ms", "runtime.job_timeout_ms", true);
      !p.empty()) {
    return refuse(p);
  }
  if (o.compare && (o.engine != "sim" || o.node != 0)) {
    return refuse("--compare: the simulated engine's run on node 0 is what it compares");
  }
  std::string token = c.runtime.token;
  if (token.empty()) {
    if (const char* env = std::getenv("KVCONNECT_TOKEN"); env != nullptr) token = env;
  }
  if (nodes > 1) {
    // The other nodes reach the scheduler at the first node's host, a fixed port, the token.
    if (token.empty()) {
      return refuse("a launch over " + std::to_string(nodes) +
                    " nodes needs the shared token: set runtime.token or $KVCONNECT_TOKEN on "
                    "every node");
    }
    if (c.runtime.port == 0) {
      return refuse("a launch over " + std::to_string(nodes) +
                    " nodes needs a fixed runtime.port (0 picks a free one, which the other "
                    "nodes cannot know)");
    }
    const std::string& h = c.topology.nodes[0].host;
    if (h == "0.0.0.0" || h == "::" || h == "*") {
      return refuse("topology.nodes[0].host: \"" + h +
                    "\" is no address the other nodes can reach the scheduler at");
    }
  }
  if (token.empty()) token = generate_token();  // one node: nobody else needs to know it
  const std::string instance =
      c.runtime.instance.empty() ? "launch-" + std::to_string(::getpid()) : c.runtime.instance;
  // The tier's directories first: then make_plan's tier check (check_tier_config).
  if (auto st = check_tier_dirs(c); !st) return refuse(st.message());
  auto plan = make_plan(c, instance, token);
  if (!plan) return refuse(plan.error().to_string());
  const auto ranks = plan->ranks_on(o.node);
  // Process faults: node 0's launcher carries them out, on the ranks of node 0.
  auto faults = parse_fault_options(c.runtime.faults, c.runtime.fault_seed);
  if (!faults) return refuse("runtime.faults: " + faults.error().message());
  process_fault_schedule process_faults;
  if (o.node == 0) {
    auto s = process_fault_schedule::create(*faults, ranks);
    if (!s) return refuse("runtime.faults: " + s.error().message());
    process_faults = std::move(s).value();
  }
  if (auto st = make_observe_dirs(c, o.node); !st) return refuse(st.message());
  const std::string segment = shm::segment_name(::getuid(), instance, o.node);

  sweep_stale_segments(c.runtime.log_level);
  signal_watcher signals;  // before any child: they must not inherit a half-set-up state
  // Another node's segment: its launcher creates it (node 0's scheduler creates node 0's) and
  // removes it at the end; its workers attach to it.
  std::optional<shm::segment> own_segment;
  if (o.node != 0) {
    auto seg = shm::segment::create(segment, plan->pool);
    if (!seg) {
      say("cannot create " + segment + ": " + seg.error().to_string());
      return 1;
    }
    own_segment.emplace(std::move(seg).value());
  }
  node_run run(c, *plan, o.node, ranks, o.binary, child_environment(token, c.runtime.log_level),
               o.engine == "sim", std::move(process_faults), c.runtime.fault_seed);
  int code = run.run(signals);
  own_segment.reset();  // removes it

  // A scheduler that was killed cannot remove its segment: the launch does, when the segment's
  // header names that scheduler. A segment of the same name that another live process created
  // (a second launch of the instance, refused) is not this launch's to remove.
  bool segment_left = false;
  if (o.node == 0 && run.scheduler_pid() > 0) {
    auto removed = shm::remove_segment_left_by(segment, run.scheduler_pid());
    if (!removed) {
      say(removed.error().to_string());
    } else if (*removed) {
      segment_left = true;
      if (spdlog::level::from_str(c.runtime.log_level) <= spdlog::level::warn) {
        say("removed " + segment + ", left behind by the scheduler (pid " +
            std::to_string(run.scheduler_pid()) + ")");
      }
    }
  }
  const auto wall = std::chrono::duration<double>(clock::now() - t0).count();
  json summary{{"event", "summary"},
               {"ok", code == 0},
               {"exit_code", code},
               {"reason", run.outcome().reason()},
               {"node", o.node},
               {"ranks", ranks.size()},
               {"world_size", plan->kv.world_size},
               {"restarts", run.outcome().restarts()},
               {"segment", segment},
               {"segment_left", segment_left},
               {"wall_seconds", std::round(wall * 1000) / 1000}};
  // From the launcher's start to the scheduler's first step (every rank registered).
  summary["first_step_seconds"] =
      run.ready_at()
          ? json(std::round(std::chrono::duration<double>(*run.ready_at() - t0).count() * 1000) /
                 1000)
          : json();
  // Node 0 has the scheduler's figures; another node has its workers' checks.
  const bool sim_figures = o.engine == "sim" && (run.sim() || o.node != 0);
  const bool checked =
      !sim_figures ||
      add_sim_figures(summary, run.sim(), run.runners(), ranks.size(), run.rank_connector_ns());
  // With faults: one fault report of the whole node, whose invariants are the summary's counts
  // (one source for both lines), and exit 3 when one failed.
  if (auto report = run.fault_report()) {
    if (sim_figures) take_invariants(*report, summary);
    else (*report)["invariants_ok"] = invariants_ok(*report);
    if (!report->value("invariants_ok", true)) code = 3;
    emit(*report);
  }
  summary["ok"] = code == 0;
  summary["exit_code"] = code;
  std::optional<json> compared;
  if (o.engine == "sim") {
    if (sim_figures) {
      if (code == 0 && !checked) {
        code = 1;
        summary["reason"] =
            std::to_string(run.runners().size()) + " of " + std::to_string(ranks.size()) +
            " workers reported their load checks; mismatches: " + summary["load_mismatches"].dump();
      }
    } else {
      summary["steps"] = json();
    }
    summary["ok"] = code == 0;
    summary["exit_code"] = code;
    if (run.sim() || o.node != 0) print_sim_table(summary);
    if (o.compare && run.sim()) {
      compared = compare_without_offload(c, summary, run.finished());
      if (!compared && code == 0) code = 1;
      summary["ok"] = code == 0;
      summary["exit_code"] = code;
    }
  } else {
    for (const char* k :
         {"steps", "jobs_ok", "jobs_failed", "rounds_interrupted", "slots_checked", "bytes"}) {
      summary[k] = run.smoke() ? run.smoke()->value(k, json()) : json();
    }
  }
  emit(summary);
  if (compared) emit(*compared);
  return code;
}

}  // namespace kvc::launch
