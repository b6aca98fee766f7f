// op_validator: cheap on success (no allocation for ops already in destination order), exact
// on failure (the message names the ops), strict placement and the ordering rule.
#include "cuda/op_validator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

// Counts every allocation of this test binary, so a test can assert that a call made none.
namespace {
std::atomic<size_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) std::abort();
  return p;
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace kvc::cuda {
namespace {

std::byte* at(uintptr_t a) {
  return reinterpret_cast<std::byte*>(a);
}

/// `n` ops of 64 B: sources at 0x100000 + 64k, destinations at 0x200000 + 64k.
std::vector<copy_op> ordered_ops(size_t n) {
  std::vector<copy_op> ops;
  for (size_t k = 0; k < n; ++k) ops.push_back({at(0x100000 + 64 * k), at(0x200000 + 64 * k), 64});
  return ops;
}

TEST(OpValidatorTest, OrderedValidOpsAllocateNothing) {
  const std::vector<copy_op> ops = ordered_ops(256);
  const size_t before = g_allocations.load();
  const status s = validate_ops(ops);
  const size_t after = g_allocations.load();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(after - before, 0u) << "the success path built a string or sorted";
}

TEST(OpValidatorTest, UnorderedOverlapsAreFoundAndNamed) {
  std::vector<copy_op> ops = ordered_ops(8);
  std::swap(ops[2], ops[6]);
  EXPECT_TRUE(validate_ops(ops).ok());
  ops[1].dst = at(0x200000 + 64 * 6 + 8);  // now overlaps ops[2] (which holds old op 6)
  const status s = validate_ops(ops);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find("copy ops 1 and 2"), std::string::npos) << s.message();
  ops[1].bytes = 32;  // mixed sizes: the sorted check names the same pair
  const status mixed = validate_ops(ops);
  EXPECT_NE(mixed.message().find("copy ops 1 and 2"), std::string::npos) << mixed.message();
}

// Loads into the GPU blocks vLLM allocated arrive in any order: a warm checker validates them
// without allocating or sorting.
TEST(OpValidatorTest, UnorderedEqualSizedOpsAllocateNothingOnAWarmChecker) {
  std::vector<copy_op> ops = ordered_ops(1024);
  for (size_t k = 0; k < ops.size(); ++k) std::swap(ops[k], ops[(k * 389) % ops.size()]);
  op_checker checker;
  ASSERT_TRUE(checker.validate(ops).ok());  // sizes its scratch
  const size_t before = g_allocations.load();
  const status s = checker.validate(ops);
  const size_t after = g_allocations.load();
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(after - before, 0u);
}

// Against a brute-force pairwise check, on random op lists of equal and of mixed sizes, dense
// enough that about half of them overlap somewhere.
TEST(OpValidatorTest, AgreesWithPairwiseOverlapOnRandomOpLists) {
  uint64_t rng = 12345;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 33;
  };
  op_checker checker;
  int overlapping = 0;
  for (int round = 0; round < 2040; ++round) {
    // The last 40 rounds are long enough for the hashed check of equal-sized ops.
    const size_t n = round < 2000 ? 2 + next() % 40 : op_checker::hash_from_ops + next() % 200;
    const bool mixed = round % 2 == 1;
    std::vector<copy_op> ops;
    if (round < 2000) {
      for (size_t k = 0; k < n; ++k) {
        const size_t bytes = mixed ? 1 + next() % 96 : 64;
        ops.push_back({at(0x100000 + 64 * k), at(0x800000 + next() % (64 * n * 6)), bytes});
      }
    } else {
      // Distinct 64-byte pages of a larger area in shuffled order; every other round one op is
      // moved onto part of another.
      std::vector<size_t> page(2 * n);
      for (size_t k = 0; k < page.size(); ++k) page[k] = k;
      for (size_t k = page.size(); k > 1; --k) std::swap(page[k - 1], page[next() % k]);
      for (size_t k = 0; k < n; ++k) {
        ops.push_back({at(0x100000 + 64 * k), at(0x800000 + 64 * page[k]), 64});
      }
      if (mixed) ops[next() % n].dst = at(0x800000 + 64 * page[next() % n] + next() % 64);
    }
    bool pairwise = false;
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = a + 1; b < n; ++b) {
        const auto da = reinterpret_cast<uintptr_t>(ops[a].dst);
        const auto db = reinterpret_cast<uintptr_t>(ops[b].dst);
        pairwise = pairwise || (da < db + ops[b].bytes && db < da + ops[a].bytes);
      }
    }
    overlapping += pairwise ? 1 : 0;
    EXPECT_EQ(!checker.validate(ops).ok(), pairwise) << "round " << round;
    EXPECT_EQ(!validate_ops(ops).ok(), pairwise) << "round " << round;
  }
  EXPECT_GT(overlapping, 200);
  EXPECT_LT(overlapping, 1800);
}

TEST(OpValidatorTest, OrderedOverlapNamesBothOps) {
  std::vector<copy_op> ops = ordered_ops(4);
  ops[3].dst = at(0x200000 + 64 * 2 + 63);  // still ascending, one byte into op 2
  const status s = validate_ops(ops);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find("copy ops 2 and 3"), std::string::npos) << s.message();
  ops[3].dst = at(0x200000 + 64 * 2);  // same destination as op 2: still ascending
  EXPECT_EQ(validate_ops(ops).code(), errc::invalid_argument);
}

TEST(OpValidatorTest, PerOpErrorsNameTheOp) {
  std::vector<copy_op> ops = ordered_ops(3);
  ops[2].bytes = 0;
  EXPECT_NE(validate_ops(ops).message().find("copy op 2: zero bytes"), std::string::npos);
  ops[2] = {at(UINTPTR_MAX - 10), at(0x300000), 64};
  EXPECT_NE(validate_ops(ops).message().find("wraps"), std::string::npos);
  ops[2] = {at(0x300000), at(0x300010), 64};
  EXPECT_NE(validate_ops(ops).message().find("overlaps its destination"), std::string::npos);
}

class PlacementTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(device_.insert(0x10000, 0x1000).ok());
    ASSERT_TRUE(host_.insert(0x80000, 0x1000).ok());  // two pinned chunks, adjacent
    ASSERT_TRUE(host_.insert(0x81000, 0x1000).ok());
  }
  status check(direction dir, copy_op op) {
    return check_placement(dir, std::span(&op, 1), host_, device_);
  }
  address_range_set host_, device_;
};

TEST_F(PlacementTest, AcceptsOpsInsideOneRangeEachSide) {
  EXPECT_TRUE(check(direction::gpu_to_cpu, {at(0x10000), at(0x80000), 0x1000}).ok());
  EXPECT_TRUE(check(direction::cpu_to_gpu, {at(0x81f00), at(0x10f00), 0x100}).ok());
}

TEST_F(PlacementTest, RefusesEdgesOneBytePastARange) {
  const status gpu = check(direction::gpu_to_cpu, {at(0x10f00), at(0x80000), 0x101});
  EXPECT_EQ(gpu.code(), errc::invalid_argument);
  EXPECT_NE(gpu.message().find("GPU side"), std::string::npos) << gpu.message();
  const status cpu = check(direction::gpu_to_cpu, {at(0x10000), at(0x7ffff), 0x10});
  EXPECT_NE(cpu.message().find("CPU side"), std::string::npos) << cpu.message();
  // Straddles the two pinned chunks: a copy must lie inside one registration.
  const status straddle = check(direction::cpu_to_gpu, {at(0x80f80), at(0x10000), 0x100});
  EXPECT_NE(straddle.message().find("CPU side"), std::string::npos) << straddle.message();
}

TEST_F(PlacementTest, NamesSwappedSides) {
  const status s = check(direction::gpu_to_cpu, {at(0x80000), at(0x10000), 0x100});
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find("swapped"), std::string::npos) << s.message();
}

TEST(OrderingRuleTest, NeedsAnEventOrNoDependency) {
  int event = 0;  // any non-null handle
  EXPECT_EQ(check_ordering({}).code(), errc::invalid_argument);
  EXPECT_NE(check_ordering({}).message().find("wait_event"), std::string::npos);
  EXPECT_TRUE(check_ordering({.wait_event = &event}).ok());
  EXPECT_TRUE(check_ordering({.no_dependency = true}).ok());
}

}  // namespace
}  // namespace kvc::cuda
