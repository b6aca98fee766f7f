// address_range_set: insertion refuses overlaps and wrapping ranges; lookups are exact at the
// edges and never overflow.
#include "cuda/address_range_set.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace kvc::cuda {
namespace {

TEST(AddressRangeSetTest, ContainsIsExactAtTheEdges) {
  address_range_set set;
  ASSERT_TRUE(set.insert(1000, 100).ok());
  EXPECT_TRUE(set.contains(uintptr_t{1000}, 100));
  EXPECT_TRUE(set.contains(uintptr_t{1099}, 1));
  EXPECT_FALSE(set.contains(uintptr_t{1099}, 2)) << "runs one byte past the end";
  EXPECT_FALSE(set.contains(uintptr_t{999}, 2)) << "starts one byte before";
  EXPECT_FALSE(set.contains(uintptr_t{1100}, 1)) << "the end is exclusive";
  EXPECT_FALSE(set.contains(uintptr_t{1000}, 0)) << "an empty range lies in nothing";
}

TEST(AddressRangeSetTest, ContainsNeedsOneRangeNotTwoAdjacentOnes) {
  address_range_set set;
  ASSERT_TRUE(set.insert(1000, 100).ok());
  ASSERT_TRUE(set.insert(1100, 100).ok()) << "adjacent ranges do not overlap";
  EXPECT_TRUE(set.contains(uintptr_t{1050}, 50));
  EXPECT_TRUE(set.contains(uintptr_t{1100}, 50));
  EXPECT_FALSE(set.contains(uintptr_t{1050}, 100)) << "straddles two ranges";
  EXPECT_EQ(set.size(), 2u);
}

TEST(AddressRangeSetTest, InsertRefusesOverlapZeroAndWrap) {
  address_range_set set;
  ASSERT_TRUE(set.insert(1000, 100).ok());
  EXPECT_EQ(set.insert(1099, 10).code(), errc::invalid_argument);
  EXPECT_EQ(set.insert(990, 11).code(), errc::invalid_argument);
  EXPECT_EQ(set.insert(900, 400).code(), errc::invalid_argument) << "covers the range";
  EXPECT_EQ(set.insert(1010, 10).code(), errc::invalid_argument) << "inside the range";
  EXPECT_EQ(set.insert(5000, 0).code(), errc::invalid_argument);
  EXPECT_EQ(set.insert(UINTPTR_MAX - 10, 20).code(), errc::invalid_argument);
  EXPECT_EQ(set.size(), 1u) << "a refused insert changed the set";
  EXPECT_TRUE(set.insert(UINTPTR_MAX - 10, 10).ok()) << "ends exactly at the top";
  EXPECT_TRUE(set.contains(UINTPTR_MAX - 1, 1));
}

TEST(AddressRangeSetTest, LookupsWithWrappingRangesDoNotOverflow) {
  address_range_set set;
  ASSERT_TRUE(set.insert(1000, 100).ok());
  ASSERT_TRUE(set.insert(UINTPTR_MAX - 100, 50).ok());
  EXPECT_FALSE(set.contains(uintptr_t{1050}, SIZE_MAX)) << "p + bytes wraps";
  EXPECT_FALSE(set.contains(UINTPTR_MAX - 90, SIZE_MAX));
  EXPECT_TRUE(set.overlaps(uintptr_t{2000}, SIZE_MAX)) << "reaches the top range";
  EXPECT_TRUE(set.overlaps(UINTPTR_MAX - 60, SIZE_MAX));
  EXPECT_FALSE(set.overlaps(UINTPTR_MAX - 40, SIZE_MAX));
}

TEST(AddressRangeSetTest, OverlapsAnyByte) {
  address_range_set set;
  ASSERT_TRUE(set.insert(1000, 100).ok());
  EXPECT_TRUE(set.overlaps(uintptr_t{900}, 101));
  EXPECT_FALSE(set.overlaps(uintptr_t{900}, 100));
  EXPECT_TRUE(set.overlaps(uintptr_t{1099}, 5));
  EXPECT_FALSE(set.overlaps(uintptr_t{1100}, 5));
  EXPECT_FALSE(set.overlaps(uintptr_t{1050}, 0));
  EXPECT_TRUE(set.erase(1000));
  EXPECT_FALSE(set.erase(1000));
  EXPECT_FALSE(set.overlaps(uintptr_t{1050}, 1));
}

}  // namespace
}  // namespace kvc::cuda
