#include "actors/scheduler/manager_config.hpp"

#include <gtest/gtest.h>

#include "actors/scheduler/offload_manager.hpp"

namespace kvc::scheduler {
namespace {

manager_config valid() {
  manager_config c;
  c.capacity = 16;
  return c;
}

TEST(ManagerConfigTest, ParsesPolicyNames) {
  EXPECT_EQ(*parse_eviction_policy("lru"), eviction_policy::lru);
  EXPECT_EQ(*parse_eviction_policy("arc"), eviction_policy::arc);
  for (const char* bad : {"LRU", "fifo", "", "arc "}) {
    auto r = parse_eviction_policy(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.code(), errc::unknown_policy);
    EXPECT_NE(r.error().message().find("expected lru or arc"), std::string::npos);
  }
  EXPECT_EQ(to_string(eviction_policy::lru), "lru");
  EXPECT_EQ(to_string(eviction_policy::arc), "arc");
}

TEST(ManagerConfigTest, AcceptsDefaultsAndFilter) {
  EXPECT_TRUE(validate(valid()).ok());
  manager_config c = valid();
  c.store_threshold = 2;
  c.max_tracker_size = 1;
  EXPECT_TRUE(validate(c).ok());
  c.store_threshold = 0;
  c.max_tracker_size = 0;  // irrelevant while the filter is off
  EXPECT_TRUE(validate(c).ok());
}

TEST(ManagerConfigTest, RejectsBadValues) {
  manager_config c = valid();
  c.capacity = 0;
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
  c = valid();
  c.capacity = max_manager_capacity + 1;
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
  c = valid();
  c.store_threshold = 1;
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
  c = valid();
  c.store_threshold = 2;
  c.max_tracker_size = 0;
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
  c.max_tracker_size = max_tracker_entries + 1;
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
  c = valid();
  c.policy = static_cast<eviction_policy>(7);
  EXPECT_EQ(validate(c).code(), errc::unknown_policy);
}

TEST(ManagerConfigTest, CreateReportsValidationErrors) {
  manager_config c = valid();
  c.store_threshold = 1;
  auto m = offload_manager::create(c);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.code(), errc::invalid_argument);
  EXPECT_EQ(m.error().message(), "store_threshold must be 0 (reuse filter off) or >= 2, got 1");
  c = valid();
  c.policy = eviction_policy::arc;
  m = offload_manager::create(c);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->capacity(), 16u);
  EXPECT_EQ((*m)->size(), 0u);
}

}  // namespace
}  // namespace kvc::scheduler
