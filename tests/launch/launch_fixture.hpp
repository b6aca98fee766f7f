#pragma once
// What the multi-process launch tests share: a run instance of their own, the launcher as a
// child process, and the check at the end that no process of the launch and no /dev/shm
// segment of the instance is left (anything left is killed or removed, and the test fails).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "tests/shm/shm_entries.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::launch {

class launch_fixture : public ::testing::Test {
 protected:
  /// `prefix`: the instance's first letters, so that tests of two suites never share one.
  explicit launch_fixture(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    static int counter = 0;
    instance_ = prefix_ + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    ASSERT_TRUE(leftover_segments().empty());
  }

  void TearDown() override {
    if (launcher_.running()) ADD_FAILURE() << "the launcher still runs: killed";
    launcher_ = testing::child_process{};  // SIGKILLs and reaps it if still running
    for (pid_t pid : launched_pids()) {
      if (::kill(pid, 0) == 0 || errno != ESRCH) {
        ADD_FAILURE() << "child " << pid << " of the launch is still there: killed";
        ::kill(pid, SIGKILL);
      }
    }
    const auto left = leftover_segments();
    for (const auto& n : left) ::shm_unlink(n.c_str());
    EXPECT_TRUE(left.empty()) << "segments left behind: " << ::testing::PrintToString(left);
  }

  /// Every process the launch started that the test knows of (checked gone at the end).
  virtual std::vector<pid_t> launched_pids() const = 0;

  std::vector<std::string> leftover_segments() const {
    return shm::testing::shm_entries(instance_ + "-");
  }

  std::string instance_;
  testing::child_process launcher_;

 private:
  std::string prefix_;
};

}  // namespace kvc::launch
