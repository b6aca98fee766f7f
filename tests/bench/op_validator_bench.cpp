// op_validator on the submit path: a load's ops arrive in the order of the GPU blocks vLLM
// allocated, a store's in the order of the slots the pool handed out. Compares, in one run, the
// checker (hash of destination buckets for equal-sized ops) with the sort the engine used before
// (indices sorted by destination, then one pass), and with ops already in destination order.
// Google Benchmark; not a test. Run: build/tests/bench/op_validator_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda/op_validator.hpp"

namespace {

using kvc::cuda::copy_op;

/// `n` pages of 16 KiB (a vLLM page of one layer) in a shuffled or ascending order.
std::vector<copy_op> pages(size_t n, bool shuffled) {
  std::vector<copy_op> ops;
  for (size_t k = 0; k < n; ++k) {
    ops.push_back({reinterpret_cast<const void*>(uintptr_t{1} << 32 | (k << 14)),
                   reinterpret_cast<void*>(uintptr_t{1} << 40 | (k << 14)), size_t{1} << 14});
  }
  if (shuffled) {
    uint64_t x = 88172645463325252ull;
    for (size_t k = n; k > 1; --k) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::swap(ops[k - 1], ops[x % k]);
    }
  }
  return ops;
}

/// The check the engine ran before: sort indices by destination, then look at neighbours.
bool sorted_check(const std::vector<copy_op>& ops, std::vector<size_t>& order) {
  order.resize(ops.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto dst = [&](size_t i) { return reinterpret_cast<uintptr_t>(ops[i].dst); };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return dst(a) < dst(b); });
  for (size_t i = 1; i < order.size(); ++i) {
    if (dst(order[i]) < dst(order[i - 1]) + ops[order[i - 1]].bytes) return false;
  }
  return true;
}

void BM_SortedCheckShuffled(benchmark::State& state) {
  const auto ops = pages(static_cast<size_t>(state.range(0)), true);
  std::vector<size_t> order;
  for (auto _ : state) benchmark::DoNotOptimize(sorted_check(ops, order));
}

void BM_CheckerShuffled(benchmark::State& state) {
  const auto ops = pages(static_cast<size_t>(state.range(0)), true);
  kvc::cuda::op_checker checker;
  for (auto _ : state) benchmark::DoNotOptimize(checker.validate(ops).ok());
}

void BM_CheckerAscending(benchmark::State& state) {
  const auto ops = pages(static_cast<size_t>(state.range(0)), false);
  kvc::cuda::op_checker checker;
  for (auto _ : state) benchmark::DoNotOptimize(checker.validate(ops).ok());
}

BENCHMARK(BM_SortedCheckShuffled)->Arg(64)->Arg(1024)->Arg(4096)->Arg(16384);
BENCHMARK(BM_CheckerShuffled)->Arg(64)->Arg(1024)->Arg(4096)->Arg(16384);
BENCHMARK(BM_CheckerAscending)->Arg(64)->Arg(1024)->Arg(4096)->Arg(16384);

}  // namespace

BENCHMARK_MAIN();
