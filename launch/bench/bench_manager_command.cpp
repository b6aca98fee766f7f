// `kvconnect bench gen-trace` and `kvconnect bench manager`: the offload-manager benchmark of
// the reference spec §10. gen-trace writes a deterministic request trace (one request per
// line, space-separated integer keys); manager replays it through an offload_manager with the
// connector's call pattern and prints one JSON line. tests/bench/reference_manager.py runs the
// same loop in Python (the baseline) and must report the same counters.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/scheduler/manager_config.hpp"
#include "actors/scheduler/offload_manager.hpp"
#include "launch/bench/bench_commands.hpp"
#include "proto/block_key.hpp"
#include "proto/kv_event.hpp"

namespace kvc::launch {
namespace {

struct trace_options {
  uint64_t requests = 0;
  uint64_t seed = 0;
  uint32_t documents = 4000;
  uint32_t chain = 32;   ///< keys per document and per request
  double zipf_s = 1.1;
  uint32_t min_prefix = 8;
};

/// CPU seconds of this process (robust to other load on the machine, unlike wall time).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Uniform double in [0, 1) from 53 random bits (portable, unlike generate_canonical).
double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

/// §10 trace: each request picks a document by Zipf(s) (inverse-CDF table), takes the first P
/// keys of its fixed chain, P ~ U[min_prefix, chain], then chain - P never-seen keys.
/// Document d owns keys [d * chain, (d + 1) * chain); fresh keys follow all documents.
void generate_trace(const trace_options& o, std::FILE* out) {
  std::vector<double> cdf(o.documents);
  double sum = 0;
  for (uint32_t d = 0; d < o.documents; ++d) cdf[d] = (sum += std::pow(double(d + 1), -o.zipf_s));
  for (double& c : cdf) c /= sum;
  std::mt19937_64 rng{o.seed};
  const uint64_t span = uint64_t{o.chain} - o.min_prefix + 1;
  uint64_t fresh = uint64_t{o.documents} * o.chain;
  std::string line;
  char num[24];
  for (uint64_t r = 0; r < o.requests; ++r) {
    const double u = uniform01(rng);
    const auto doc = static_cast<uint64_t>(
        std::min<size_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin(),
                         o.documents - 1));
    const uint64_t prefix = o.min_prefix + rng() % span;
    line.clear();
    for (uint64_t j = 0; j < o.chain; ++j) {
      const uint64_t key = j < prefix ? doc * o.chain + j : fresh++;
      auto [end, ec] = std::to_chars(num, num + sizeof num, key);
      if (j) line += ' ';
      line.append(num, end);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), out);
  }
  std::fflush(out);
}

/// A parsed trace: all keys in one array, request r = keys[offsets[r], offsets[r + 1]).
struct trace {
  std::vector<block_key> keys;
  std::vector<size_t> offsets{0};
  size_t requests() const { return offsets.size() - 1; }
  std::span<const block_key> request(size_t r) const {
    return {keys.data() + offsets[r], offsets[r + 1] - offsets[r]};
  }
};

trace load_trace(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in) throw std::runtime_error("bench manager: cannot open trace " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  trace t;
  const char* p = text.data();
  const char* end = p + text.size();
  size_t line_no = 1;
  while (p < end) {
    if (*p == '\n') {
      if (t.keys.size() > t.offsets.back()) t.offsets.push_back(t.keys.size());
      ++line_no;
      ++p;
    } else if (*p == ' ' || *p == '\t' || *p == '\r') {
      ++p;
    } else {
      uint64_t v = 0;
      auto [next, ec] = std::from_chars(p, end, v);
      if (ec != std::errc{} || (next < end && *next != ' ' && *next != '\t' && *next != '\r' &&
                                *next != '\n'))
        throw std::runtime_error("bench manager: " + path + ":" + std::to_string(line_no) +
                                 ": keys must be non-negative integers");
      t.keys.push_back(block_key::from_index(v));
      p = next;
    }
  }
  if (t.keys.size() > t.offsets.back()) t.offsets.push_back(t.keys.size());
  return t;
}

struct bench_options {
  std::string trace_path;
  std::string policy = "lru";
  uint32_t store_threshold = 0;
  uint32_t capacity = 65536;
  uint32_t window = 8;
};

/// Loads and stores complete `window` jobs later, oldest first: a fixed ring of job slots.
/// A load's keys are a prefix of a trace request, which does not change during the run, so the
/// job only points at them; a store's keys (the manager's buffer, reused by its next call) are
/// copied into the slot, which has room for the longest request. Pushing never allocates.
class job_fifo {
 public:
  job_fifo(size_t window, size_t max_keys)
      : slots_(window + 3), width_(max_keys), keys_(slots_ * max_keys) {
    jobs_.resize(slots_);
  }
  size_t size() const { return size_; }
  /// `keys` must stay valid until the job is popped.
  void push_load(std::span<const block_key> keys) {
    jobs_[(head_ + size_) % slots_] = {false, keys.data(), keys.size()};
    ++size_;
  }
  void push_store(std::span<const block_key> keys) {
    const size_t at = (head_ + size_) % slots_;
    block_key* copy = keys_.data() + at * width_;
    std::copy(keys.begin(), keys.end(), copy);
    jobs_[at] = {true, copy, keys.size()};
    ++size_;
  }
  template <class Fn>
  void pop(Fn&& fn) {
    const job j = jobs_[head_];
    head_ = (head_ + 1) % slots_;
    --size_;
    fn(j.store, std::span<const block_key>{j.keys, j.count});
  }

 private:
  struct job {
    bool store = false;
    const block_key* keys = nullptr;
    size_t count = 0;
  };
  size_t slots_;
  size_t width_;
  std::vector<block_key> keys_;
  std::vector<job> jobs_;
  size_t head_ = 0;
  size_t size_ = 0;
};

int run_manager_bench(const bench_options& o) {
  scheduler::manager_config cfg;
  cfg.capacity = o.capacity;
  cfg.store_threshold = o.store_threshold;
  auto policy = scheduler::parse_eviction_policy(o.policy);
  if (!policy) throw std::runtime_error(policy.error().to_string());
  cfg.policy = *policy;
  auto created = scheduler::offload_manager::create(cfg);
  if (!created) throw std::runtime_error(created.error().to_string());
  scheduler::offload_manager& m = **created;
  const trace t = load_trace(o.trace_path);

  size_t longest = 0;
  for (size_t r = 0; r < t.requests(); ++r) longest = std::max(longest, t.request(r).size());
  job_fifo fifo{o.window, longest};
  uint64_t key_ops = 0, hit_blocks = 0, stored = 0, evicted = 0, store_fail = 0, events = 0;
  auto count_event = [&events](kv_event_kind, std::span<const block_key>) { ++events; };
  bool load_error = false;
  const double cpu_start = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (size_t r = 0; r < t.requests(); ++r) {
    const std::span<const block_key> keys = t.request(r);
    if (r + 2 < t.requests()) {  // the trace is read once: fetch a later request's keys ahead
      const std::span<const block_key> later = t.request(r + 2);
      for (size_t b = 0; b < later.size_bytes(); b += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(later.data()) + b);
    }
    m.touch(keys);
    key_ops += keys.size();
    const uint32_t hits = m.lookup_prefix(keys);
    key_ops += std::min<size_t>(hits + 1, keys.size());
    hit_blocks += hits;
    if (hits > 0) {
      const auto loaded = keys.first(hits);
      load_error |= !m.prepare_load(loaded).ok();
      key_ops += hits;
      fifo.push_load(loaded);  // a prefix of the trace's request
    }
    const auto rest = keys.subspan(hits);
    const auto plan = m.prepare_store(rest);
    key_ops += rest.size();
    if (!plan) {
      ++store_fail;
    } else if (!plan->keys.empty()) {
      stored += plan->keys.size();
      evicted += plan->evicted.size();
      fifo.push_store(plan->keys);  // copied: the next call reuses the buffer
      m.touch(keys);
      key_ops += keys.size();
    }
    while (fifo.size() > o.window) {
      fifo.pop([&](bool store, std::span<const block_key> done) {
        if (store) {
          m.complete_store(done, true);
        } else {
          load_error |= !m.complete_load(done).ok();
        }
        key_ops += done.size();
      });
    }
    if ((r + 1) % 1024 == 0) m.drain_events(count_event);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu_start;
  m.drain_events(count_event);
  if (load_error) throw std::runtime_error("bench manager: a load precondition failed");

  nlohmann::ordered_json out;
  out["policy"] = o.policy;
  out["store_threshold"] = o.store_threshold;
  out["requests"] = t.requests();
  out["key_ops"] = key_ops;
  out["seconds"] = seconds;
  out["key_ops_per_s"] = seconds > 0 ? double(key_ops) / seconds : 0.0;
  out["hit_blocks"] = hit_blocks;
  out["stored"] = stored;
  out["evicted"] = evicted;
  out["store_fail"] = store_fail;
  std::cout << out.dump() << std::endl;

  nlohmann::ordered_json mem;
  mem["cpu_seconds"] = cpu;
  mem["memory_bytes"] = m.memory_bytes();
  mem["bytes_per_slot"] = double(m.memory_bytes()) / double(m.capacity());
  mem["tracked_blocks"] = m.size();
  mem["events"] = events;
  std::cerr << mem.dump() << std::endl;
  return 0;
}

}  // namespace

void add_bench_manager_command(CLI::App& app, int& exit_code) {
  CLI::App* bench = &bench_group(app);

  auto to = std::make_shared<trace_options>();
  auto* gen = bench->add_subcommand("gen-trace", "Write the §10 offload trace to stdout");
  gen->add_option("--requests", to->requests, "number of requests")->required();
  gen->add_option("--seed", to->seed, "random seed")->capture_default_str();
  gen->add_option("--documents", to->documents, "documents (fixed key chains)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  gen->add_option("--chain", to->chain, "keys per request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  gen->add_option("--zipf", to->zipf_s, "Zipf exponent of the document choice")
      ->capture_default_str();
  gen->add_option("--min-prefix", to->min_prefix, "shortest shared prefix")
      ->capture_default_str();
  gen->callback([to, &exit_code] {
    if (to->min_prefix > to->chain)
      throw std::runtime_error("bench gen-trace: --min-prefix must be <= --chain");
    generate_trace(*to, stdout);
    exit_code = 0;
  });

  auto bo = std::make_shared<bench_options>();
  auto* mgr = bench->add_subcommand("manager", "Offload-manager throughput on a trace");
  mgr->add_option("--trace", bo->trace_path, "trace file (bench gen-trace)")->required()
      ->check(CLI::ExistingFile);  // a directory or a missing file is a usage error
  mgr->add_option("--policy", bo->policy, "lru or arc")->capture_default_str();
  mgr->add_option("--store-threshold", bo->store_threshold, "reuse filter threshold (0 = off)")
      ->capture_default_str();
  mgr->add_option("--capacity", bo->capacity, "CPU slots")->capture_default_str();
  mgr->add_option("--window", bo->window, "jobs in flight before completion")
      ->capture_default_str();
  mgr->callback([bo, &exit_code] { exit_code = run_manager_bench(*bo); });
}

}  // namespace kvc::launch
