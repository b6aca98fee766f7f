#pragma once
/// Test support for shm/: unique segment names per test process and a fixture that fails a test
/// which leaves any of its segments behind in /dev/shm (and removes them, so that one failure
/// does not leak into the next test). Names are "/kvc-<uid>-test<pid>-<n>-node0": the pid keeps
/// tests run in parallel by ctest apart, so each checks only its own names.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shm/segment.hpp"
#include "tests/shm/shm_entries.hpp"

namespace kvc::shm::testing {

inline std::string test_instance_prefix() {
  return "test" + std::to_string(::getpid()) + "-";
}

/// Entries of /dev/shm that belong to this test process.
inline std::vector<std::string> leftover_segments() {
  return shm_entries(test_instance_prefix());
}

class ShmTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(leftover_segments().empty()); }
  void TearDown() override {
    const auto left = leftover_segments();
    for (const auto& n : left) ::shm_unlink(n.c_str());
    EXPECT_TRUE(left.empty()) << "segments left behind: " << ::testing::PrintToString(left);
  }

  /// A fresh name for this test.
  std::string unique_name() {
    return segment_name(::getuid(), test_instance_prefix() + std::to_string(counter_++), 0);
  }

 private:
  int counter_ = 0;
};

}  // namespace kvc::shm::testing
