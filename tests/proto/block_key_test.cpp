#include "proto/block_key.hpp"

#include <gtest/gtest.h>

#include <unordered_set>

namespace kvc {
namespace {

TEST(BlockKeyTest, FromIndexIsOneToOne) {
  std::unordered_set<block_key> seen;
  for (uint64_t i = 0; i < 10000; ++i) {
    block_key k = block_key::from_index(i);
    EXPECT_EQ(k.to_index(), i);
    EXPECT_TRUE(seen.insert(k).second);
  }
}

TEST(BlockKeyTest, EqualityUsesBothHalves) {
  block_key a{1, 2};
  EXPECT_EQ(a, (block_key{1, 2}));
  EXPECT_NE(a, (block_key{1, 3}));
  EXPECT_NE(a, (block_key{0, 2}));
}

}  // namespace
}  // namespace kvc
