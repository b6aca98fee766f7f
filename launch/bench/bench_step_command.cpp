// `kvconnect bench step`: the control-plane round trip of one engine step through the embedding
// API, next to a bare ZeroMQ round trip to as many processes, measured in the same run.
//
// kvconnect path (what is timed, per step, with steady_clock in the engine thread):
//   scheduler_connector::build_connector_meta (an empty step) -> the metadata to N worker
//   processes on the step channel (encoded once, sent from the engine thread over ZeroMQ) ->
//   each worker's engine thread (bind_connector_metadata ... get_finished ...
//   clear_connector_metadata, no jobs) -> its report to the coordinator actor (blocking on the
//   engine thread) -> the step's aggregated output -> update_connector_output(step) returns.
// ZeroMQ baseline: a ROUTER in this process, one DEALER per worker process on tcp://127.0.0.1;
// per step a 64-byte message to each, wait for every echo.
//
// Both sets of N processes are children of this one (this binary re-executed with the hidden
// `bench step-worker`), alive during the whole run; the two paths alternate in blocks (--rounds)
// so that a noisy phase of the host hits both. Prints a table and, last, one JSON line.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "actors/embed/worker_step.hpp"
#include "launch/bench/bench_commands.hpp"
#include "launch/process/signal_watcher.hpp"

extern char** environ;

namespace kvc::launch {

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

constexpr uint64_t slot_bytes = 4096;
constexpr uint32_t slots = 2;
constexpr size_t zmq_payload = 64;

struct step_options {
  uint32_t tp = 8;
  uint32_t steps = 4000;  // timed steps per path
  uint32_t warmup = 400;  // per path
  uint32_t rounds = 4;
  std::string trace_dir;  // non-empty: every kvconnect process records message traces there
};

struct worker_options {
  std::string mode;  // "kvc" or "zmq"
  std::string endpoint;
  uint16_t port = 0;
  uint32_t rank = 0;
  uint32_t tp = 1;
  std::string instance;
  std::string token;
  std::string trace_dir;
};

// --- children ---------------------------------------------------------------------------------

class children {
 public:
  ~children() { reap(2s); }

  const std::vector<pid_t>& pids() const noexcept { return pids_; }

  status spawn(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(self_.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (int rc = ::posix_spawn(&pid, self_.c_str(), nullptr, nullptr, argv.data(), environ);
        rc != 0) {
      return make_error(errc::io_error, "posix_spawn: " + std::string(std::strerror(rc)));
    }
    pids_.push_back(pid);
    return {};
  }

  /// Waits for every child to exit; kills those still running after `grace`. The number that
  /// did not exit with 0 on their own.
  size_t reap(std::chrono::milliseconds grace) {
    size_t bad = 0;
    const auto deadline = steady::now() + grace;
    for (pid_t pid : pids_) {
      // Children end on a message (the scheduler's stop, "quit"): wait for the exit on a pidfd
      // until the deadline, then kill.
      bool exited = false;
      if (const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); fd >= 0) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
        pollfd pfd{fd, POLLIN, 0};
        exited = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) > 0;
        ::close(fd);
      }
      if (!exited) ::kill(pid, SIGKILL);
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      if (!exited || !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) ++bad;
    }
    pids_.clear();
    return bad;
  }

 private:
  static std::string self_path() {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("kvconnect");
  }

  std::string self_ = self_path();
  std::vector<pid_t> pids_;
};

/// A child of bench step ends with its parent, whatever ends the parent (SIGKILL included).
bool follow_parent() {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return false;
  return ::getppid() != 1;  // the parent may have died before the prctl
}

/// A worker process of the kvconnect path: an engine worker that runs empty steps as they come.
int run_kvc_worker(const worker_options& o) {
  if (!follow_parent()) return 1;
  embed::worker_connector_config cfg;
  cfg.mode = embed::connection_mode::connect;
  cfg.network.port = o.port;
  cfg.token = o.token;
  cfg.topology.tp_size = o.tp;
  cfg.pool = {.instance = o.instance, .slots_per_rank = slots, .slot_bytes = slot_bytes};
  cfg.rank = o.rank;
  cfg.register_timeout = 30s;
  // 16 processes start at once: on a loaded host the first connection may take over the
  // default second.
  cfg.network.connection_timeout = 10s;
  if (!o.trace_dir.empty()) {
    cfg.observe.trace = trace::trace_level::messages;
    cfg.observe.trace_dir = o.trace_dir;
  }
  auto wc = embed::worker_connector::create(cfg);
  if (!wc) {
    std::cerr << "bench step-worker " << o.rank << ": " << wc.error().to_string() << "\n";
    return 2;
  }
  embed::worker_connector& w = **wc;
  auto buf = w.copy_engine().allocate_device(4 * slot_bytes);
  if (!buf) return 1;
  const cuda::kv_tensor_desc desc{reinterpret_cast<uintptr_t>(buf->data),
                                  {4, static_cast<int64_t>(slot_bytes)},
                                  {static_cast<int64_t>(slot_bytes), 1},
                                  1,
                                  0};
  if (auto st = w.register_kv_caches({&desc, 1}); !st) return 1;
  const std::vector<std::string> no_finished;
  for (step_id s = 1;; ++s) {
    // No forward, no jobs: only the calls' cost (their errors are not the benchmark's).
    const auto out = embed::run_worker_step(w, s, 1h, {.finished_ids = &no_finished});
    // io_error: the scheduler stopped us.
    if (!out.bound) return out.first_error.code() == errc::io_error ? 0 : 1;
  }
}

/// A worker process of the ZeroMQ baseline: a DEALER echoing every message until "quit".
int run_zmq_worker(const worker_options& o) {
  if (!follow_parent()) return 1;
  zmq::context_t ctx{1};
  zmq::socket_t d{ctx, zmq::socket_type::dealer};
  d.set(zmq::sockopt::routing_id, "w" + std::to_string(o.rank));
  d.set(zmq::sockopt::linger, 0);
  d.connect(o.endpoint);
  d.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  for (;;) {
    zmq::message_t m;
    if (!d.recv(m)) return 1;
    if (m.to_string_view() == "quit") return 0;
    d.send(m, zmq::send_flags::none);
  }
}

// --- the measurement --------------------------------------------------------------------------

struct percentiles {
  double p50 = 0;
  double p99 = 0;
};

percentiles summarize(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&v](double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  return {at(0.50), at(0.99)};
}

double since_us(steady::time_point t0) {
  return std::chrono::duration<double, std::micro>(steady::now() - t0).count();
}

/// CPU time (user + system, all threads) of a process so far, in microseconds; 0 if unknown.
double cpu_us(pid_t pid) {
  const std::string path = pid == 0 ? "/proc/self/stat" : "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // Fields after the command name (which is in parentheses and may hold spaces).
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  unsigned long long utime = 0, stime = 0;
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
      2) {
    return 0;
  }
  return static_cast<double>(utime + stime) * 1e6 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// CPU time of this process and the given children, in microseconds.
double cpu_us(const std::vector<pid_t>& pids) {
  double total = cpu_us(0);
  for (pid_t p : pids) total += cpu_us(p);
  return total;
}

int run_bench(const step_options& o) {
  // SIGINT / SIGTERM end the run between steps, and the normal clean-up runs: the workers are
  // stopped and reaped, the pool removed; a second signal exits at once after removing the
  // pool's name (the children follow through PR_SET_PDEATHSIG). Before any thread starts.
  signal_watcher signals;
  spdlog::set_level(spdlog::level::warn);  // the scheduler logs each registration at info
  const std::string instance = "bench-step" + std::to_string(::getpid());
  const std::string token = "bench-" + std::to_string(::getpid());
  embed::scheduler_connector_config cfg;
  cfg.listen = true;
  cfg.token = token;
  cfg.topology.tp_size = o.tp;
  cfg.pool = {.instance = instance, .slots_per_rank = slots, .slot_bytes = slot_bytes};
  if (!o.trace_dir.empty()) {
    cfg.observe.trace = trace::trace_level::messages;
    cfg.observe.trace_dir = o.trace_dir;
  }
  auto sc = embed::scheduler_connector::create(cfg);
  if (!sc) {
    std::cerr << "kvconnect bench step: " << sc.error().to_string() << "\n";
    return 1;
  }

  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);

  children kvc_kids;
  children zmq_kids;
  for (uint32_t r = 0; r < o.tp; ++r) {
    for (const char* mode : {"kvc", "zmq"}) {
      children& kids = mode[0] == 'k' ? kvc_kids : zmq_kids;
      std::vector<std::string> args{"bench",      "step-worker",
                                    "--mode",     mode,
                                    "--port",     std::to_string((*sc)->port()),
                                    "--endpoint", endpoint,
                                    "--rank",     std::to_string(r),
                                    "--tp",       std::to_string(o.tp),
                                    "--instance", instance,
                                    "--token",    token};
      if (!o.trace_dir.empty()) args.insert(args.end(), {"--trace", o.trace_dir});
      if (auto st = kids.spawn(args); !st) {
        std::cerr << "kvconnect bench step: " << st.to_string() << "\n";
        return 1;
      }
    }
  }
  if (auto st = (*sc)->wait_for_workers(60s); !st) {
    std::cerr << "kvconnect bench step: workers did not register: " << st.to_string() << "\n";
    return 1;
  }
  std::vector<std::string> ids;
  router.set(zmq::sockopt::rcvtimeo, 60000);
  while (ids.size() < o.tp) {
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(router, std::back_inserter(parts)) || parts.size() != 2) {
      std::cerr << "kvconnect bench step: zmq workers did not say hello\n";
      return 1;
    }
    ids.push_back(parts[0].to_string());
  }

  step_id step = 0;
  std::string error;
  auto kvc_step = [&]() -> double {
    const auto t0 = steady::now();
    ++step;
    auto meta = (*sc)->build_connector_meta({step, {}, {}, {}});
    auto out = meta ? (*sc)->update_connector_output(step, 10s)
                    : result<embed::connector_update>(meta.error());
    const double us = since_us(t0);
    if (!out && error.empty()) error = out.error().to_string();
    return us;
  };
  const std::string payload(zmq_payload, 'm');
  auto zmq_step = [&]() -> double {
    const auto t0 = steady::now();
    for (const auto& id : ids) {
      router.send(zmq::buffer(id), zmq::send_flags::sndmore);
      router.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(router, std::back_inserter(parts)) && error.empty()) {
        error = "a zmq echo did not come back";
      }
    }
    return since_us(t0);
  };

  signals.on_second_signal([name = (*sc)->segment_name()] { ::shm_unlink(name.c_str()); });
  std::cerr << "kvconnect bench step: " << o.tp << " + " << o.tp
            << " worker processes connected; running" << std::endl;
  for (uint32_t i = 0; i < o.warmup && !signals.signalled(); ++i) {
    kvc_step();
    zmq_step();
  }
  std::vector<double> kvc_us;
  std::vector<double> zmq_us;
  std::vector<double> round_ratios;
  double kvc_cpu = 0;  // CPU time of this process + the path's children while the path ran
  double zmq_cpu = 0;
  const uint32_t per_round = std::max<uint32_t>(1, o.steps / o.rounds);
  for (uint32_t round = 0; round < o.rounds && error.empty() && !signals.signalled(); ++round) {
    std::vector<double> c;
    std::vector<double> z;
    double cpu0 = cpu_us(kvc_kids.pids());
    for (uint32_t i = 0; i < per_round && !signals.signalled(); ++i) c.push_back(kvc_step());
    kvc_cpu += cpu_us(kvc_kids.pids()) - cpu0;
    cpu0 = cpu_us(zmq_kids.pids());
    for (uint32_t i = 0; i < per_round && !signals.signalled(); ++i) z.push_back(zmq_step());
    zmq_cpu += cpu_us(zmq_kids.pids()) - cpu0;
    if (c.empty() || z.empty()) break;  // interrupted
    round_ratios.push_back(summarize(c).p50 / summarize(z).p50);
    kvc_us.insert(kvc_us.end(), c.begin(), c.end());
    zmq_us.insert(zmq_us.end(), z.begin(), z.end());
  }

  // Stop both sets of children: the scheduler stops the workers, "quit" the echo processes.
  auto stopped = (*sc)->shutdown(10s);
  for (const auto& id : ids) {
    router.send(zmq::buffer(id), zmq::send_flags::sndmore);
    router.send(zmq::str_buffer("quit"), zmq::send_flags::none);
  }
  const size_t bad = kvc_kids.reap(10s) + zmq_kids.reap(10s);
  if (!error.empty() || !stopped || bad > 0) {
    std::cerr << "kvconnect bench step: "
              << (!error.empty() ? error
                  : !stopped     ? stopped.error().to_string()
                                 : std::to_string(bad) + " worker processes failed")
              << "\n";
    return 1;
  }
  if (const int sig = signals.signalled()) {
    std::cerr << "kvconnect bench step: interrupted by signal " << sig
              << "; workers stopped, pool removed\n";
    return 128 + sig;
  }

  const percentiles c = summarize(kvc_us);
  const percentiles z = summarize(zmq_us);
  std::printf(
      "engine step round trip to %u worker processes (empty jobs), %zu steps per path "
      "in %u alternating rounds after %u warm-up steps\n",
      o.tp, kvc_us.size(), o.rounds, o.warmup);
  const double kvc_cpu_step = kvc_cpu / static_cast<double>(kvc_us.size());
  const double zmq_cpu_step = zmq_cpu / static_cast<double>(zmq_us.size());
  std::printf("%-34s %10s %10s %14s\n", "path", "p50 us", "p99 us", "CPU us/step");
  const std::string label = "kvconnect (embed API)";
  std::printf("%-34s %10.1f %10.1f %14.1f\n", label.c_str(), c.p50, c.p99, kvc_cpu_step);
  std::printf("%-34s %10.1f %10.1f %14.1f\n", "ZeroMQ ROUTER/DEALER tcp", z.p50, z.p99,
              zmq_cpu_step);
  std::string rounds;
  for (double r : round_ratios) {
    char b[32];
    std::snprintf(b, sizeof b, "%s%.2f", rounds.empty() ? "" : ",", r);
    rounds += b;
  }
  std::printf(
      "{\"bench\":\"step\",\"tp\":%u,\"p50_us\":%.1f,\"p99_us\":%.1f,\"zmq_p50_us\":%.1f,"
      "\"ratio\":%.2f,\"zmq_p99_us\":%.1f,\"cpu_us_per_step\":%.1f,"
      "\"zmq_cpu_us_per_step\":%.1f,\"steps\":%zu,\"round_ratios\":[%s]}\n",
      o.tp, c.p50, c.p99, z.p50, c.p50 / z.p50, z.p99, kvc_cpu_step,
      zmq_cpu_step, kvc_us.size(), rounds.c_str());
  return 0;
}

}  // namespace

void add_bench_step_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<step_options>();
  auto* cmd = bench_group(app).add_subcommand(
      "step", "One engine step's control-plane round trip to TP worker processes vs bare ZeroMQ");
  cmd->add_option("--tp", opt->tp, "worker processes (tensor-parallel ranks)")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  cmd->add_option("--steps", opt->steps, "timed steps per path")
      ->check(CLI::Range(1u, 10000000u))
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "untimed steps per path first")->capture_default_str();
  cmd->add_option("--rounds", opt->rounds, "alternating blocks of the two paths")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--trace", opt->trace_dir,
                  "Record message traces (observe.trace messages) of the kvconnect path's "
                  "processes into this directory");
  cmd->callback([opt, &exit_code] { exit_code = run_bench(*opt); });

  auto wopt = std::make_shared<worker_options>();
  auto* w = bench_group(app).add_subcommand("step-worker", "(internal) a worker of bench step");
  w->group("");  // hidden from --help
  w->add_option("--mode", wopt->mode)->required()->check(CLI::IsMember({"kvc", "zmq"}));
  w->add_option("--port", wopt->port);
  w->add_option("--endpoint", wopt->endpoint);
  w->add_option("--rank", wopt->rank)->required();
  w->add_option("--tp", wopt->tp)->required();
  w->add_option("--instance", wopt->instance);
  w->add_option("--token", wopt->token);
  w->add_option("--trace", wopt->trace_dir);
  w->callback([wopt, &exit_code] {
    exit_code = wopt->mode == "kvc" ? run_kvc_worker(*wopt) : run_zmq_worker(*wopt);
  });
}

}  // namespace kvc::launch
