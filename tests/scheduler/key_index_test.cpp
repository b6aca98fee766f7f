// key_index (ordered linear probing over a node array) against std::unordered_map.
#include "actors/scheduler/key_index.hpp"

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "actors/scheduler/block_node.hpp"

namespace kvc::scheduler {
namespace {

using index = key_index<block_node>;

/// Keys from block_key::from_index(i), i >= start, whose tag satisfies `pred`.
template <class Pred>
std::vector<block_key> keys_where(size_t count, Pred pred, uint64_t start = 0) {
  std::vector<block_key> out;
  for (uint64_t i = start; out.size() < count; ++i) {
    const block_key k = block_key::from_index(i);
    if (pred(index::tag_of(k))) out.push_back(k);
  }
  return out;
}

TEST(KeyIndexTest, MatchesUnorderedMapUnderRandomOps) {
  constexpr uint32_t max_entries = 500;
  std::vector<block_node> nodes(max_entries);
  index idx{nodes.data(), max_entries};
  std::unordered_map<block_key, uint32_t> ref;
  std::vector<uint32_t> free_ids;
  for (uint32_t i = max_entries; i-- > 0;) free_ids.push_back(i);
  std::mt19937_64 rng{42};
  const uint64_t universe = 2000;
  for (int step = 0; step < 200000; ++step) {
    const block_key k = block_key::from_index(rng() % universe);
    const int op = static_cast<int>(rng() % 4);
    auto it = ref.find(k);
    if (op == 0 && it == ref.end() && !free_ids.empty()) {
      const uint32_t id = free_ids.back();
      free_ids.pop_back();
      nodes[id].set_key(k);
      ASSERT_EQ(idx.insert_or_replace(k, id), index::npos);
      ref[k] = id;
    } else if (op == 1 && it != ref.end()) {
      if (rng() % 2) {
        idx.erase(k);
      } else {
        idx.erase_id(index::tag_of(k), it->second);
      }
      free_ids.push_back(it->second);
      ref.erase(it);
    } else if (op == 2 && it != ref.end() && !free_ids.empty()) {  // move to another node
      const uint32_t id = free_ids.back();
      free_ids.pop_back();
      nodes[id].set_key(k);
      if (rng() % 2) {
        idx.replace(k, id);
      } else {
        ASSERT_EQ(idx.insert_or_replace(k, id), it->second);
      }
      free_ids.push_back(it->second);
      it->second = id;
    }
    const auto now = ref.find(k);
    ASSERT_EQ(idx.find(k), now == ref.end() ? index::npos : now->second);
    if (step % 1000 == 0) {
      std::vector<block_key> probe;
      for (uint64_t i = 0; i < 64; ++i) probe.push_back(block_key::from_index(rng() % universe));
      std::vector<uint32_t> ids(probe.size());
      idx.find_all(probe, ids.data());
      for (size_t i = 0; i < probe.size(); ++i) {
        auto r = ref.find(probe[i]);
        ASSERT_EQ(ids[i], r == ref.end() ? index::npos : r->second);
        ASSERT_EQ(idx.find(probe[i]), ids[i]);
      }
      ASSERT_EQ(idx.size(), ref.size());
    }
  }
}

TEST(KeyIndexTest, EqualTagsAreToldApartByKey) {
  // Find two keys with the same 32-bit tag (birthday search).
  std::unordered_map<uint32_t, block_key> seen;
  block_key a{}, b{};
  for (uint64_t i = 0;; ++i) {
    const block_key k = block_key::from_index(i);
    auto [it, fresh] = seen.emplace(index::tag_of(k), k);
    if (!fresh) {
      a = it->second;
      b = k;
      break;
    }
  }
  std::vector<block_node> nodes(4);
  nodes[0].set_key(a);
  nodes[1].set_key(b);
  index idx{nodes.data(), 4};
  EXPECT_EQ(idx.insert_or_replace(a, 0), index::npos);
  EXPECT_EQ(idx.find(b), index::npos);
  EXPECT_EQ(idx.insert_or_replace(b, 1), index::npos);
  EXPECT_EQ(idx.find(a), 0u);
  EXPECT_EQ(idx.find(b), 1u);
  std::vector<uint32_t> ids(2);
  idx.find_all(std::vector<block_key>{b, a}, ids.data());
  EXPECT_EQ(ids, (std::vector<uint32_t>{1, 0}));
  idx.erase(a);
  EXPECT_EQ(idx.find(a), index::npos);
  EXPECT_EQ(idx.find(b), 1u);
  // erase_id goes by the node id among entries of one tag: b (inserted after a) first.
  EXPECT_EQ(idx.insert_or_replace(a, 0), index::npos);
  idx.erase_id(index::tag_of(b), 1);
  EXPECT_EQ(idx.find(b), index::npos);
  EXPECT_EQ(idx.find(a), 0u);
  idx.erase_id(index::tag_of(a), 0);
  EXPECT_EQ(idx.find(a), index::npos);
  EXPECT_EQ(idx.size(), 0u);
}

TEST(KeyIndexTest, RunsAtTheEndSpillIntoAGrowingTail) {
  constexpr uint32_t max_entries = 64;
  // All homes in the last ~2% of the home range: the run must spill far past it.
  const auto keys = keys_where(max_entries, [](uint32_t tag) { return tag >= 0xfc000000u; });
  std::vector<block_node> nodes(max_entries);
  index idx{nodes.data(), max_entries};
  const size_t bytes_before = idx.memory_bytes();
  for (uint32_t i = 0; i < max_entries; ++i) {
    nodes[i].set_key(keys[i]);
    ASSERT_EQ(idx.insert_or_replace(keys[i], i), index::npos);
  }
  EXPECT_GT(idx.memory_bytes(), bytes_before);
  for (uint32_t i = 0; i < max_entries; ++i) ASSERT_EQ(idx.find(keys[i]), i);
  for (uint32_t i = 0; i < max_entries; i += 2) idx.erase(keys[i]);
  for (uint32_t i = 0; i < max_entries; ++i)
    ASSERT_EQ(idx.find(keys[i]), i % 2 ? i : index::npos);
  for (uint32_t i = 1; i < max_entries; i += 4) idx.erase_id(index::tag_of(keys[i]), i);
  for (uint32_t i = 0; i < max_entries; ++i)
    ASSERT_EQ(idx.find(keys[i]), i % 4 == 3 ? i : index::npos);
}

TEST(KeyIndexTest, VersionChangesOnEveryMutationOnly) {
  std::vector<block_node> nodes(4);
  index idx{nodes.data(), 4};
  const block_key k = block_key::from_index(7);
  nodes[0].set_key(k);
  nodes[1].set_key(k);
  const uint64_t v0 = idx.version();
  (void)idx.find(k);
  EXPECT_EQ(idx.version(), v0);
  (void)idx.insert_or_replace(k, 0);
  const uint64_t v1 = idx.version();
  EXPECT_NE(v1, v0);
  idx.replace(k, 1);
  EXPECT_NE(idx.version(), v1);
  const uint64_t v2 = idx.version();
  idx.erase(k);
  EXPECT_NE(idx.version(), v2);
  (void)idx.insert_or_replace(k, 0);
  const uint64_t v3 = idx.version();
  idx.erase_id(index::tag_of(k), 0);
  EXPECT_NE(idx.version(), v3);
}

}  // namespace
}  // namespace kvc::scheduler
