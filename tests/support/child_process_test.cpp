// child_process with /bin/sh children: lines in order, stdin to stdout, needles found on either
// stream (in what was already read too), exit codes and 128 + signal, the errors of a deadline,
// of an ended output and of a failed exec, and no child left behind: not by the destructor, not
// when the process that started it dies.
#include "tests/support/child_process.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace kvc::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

/// Safety net for a single wait: only a broken run ever reaches it.
constexpr auto patience = 20s;

child_process sh(const std::string& script) {
  auto c = child_process::start({"/bin/sh", "-c", script});
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  return c.ok() ? std::move(c).value() : child_process{};
}

/// Every child of this process has been reaped.
bool no_child_left() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

TEST(ChildProcessTest, ReadsStdoutLinesInOrderThenTheEnd) {
  child_process c = sh("echo one; echo two; printf three");
  EXPECT_EQ(c.read_line(patience).value(), "one");
  EXPECT_EQ(c.read_line(patience).value(), "two");
  EXPECT_EQ(c.read_line(patience).value(), "three");  // unterminated, at the end
  const auto end = c.read_line(patience);
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.code(), errc::io_error);
  EXPECT_EQ(c.stdout_text(), "one\ntwo\nthree");
  EXPECT_EQ(c.wait_exit(patience).value(), 0);
}

TEST(ChildProcessTest, AnswersLinesWrittenToItsStdin) {
  child_process c = sh("while read l; do echo \"got $l\"; done; echo bye");
  ASSERT_TRUE(c.write_line("a").ok());
  EXPECT_EQ(c.read_line(patience).value(), "got a");
  ASSERT_TRUE(c.write_line("b").ok());
  EXPECT_EQ(c.read_line(patience).value(), "got b");
  ASSERT_TRUE(c.close_stdin().ok());
  EXPECT_EQ(c.read_line(patience).value(), "bye");
  EXPECT_EQ(c.wait_exit(patience).value(), 0);
  EXPECT_EQ(c.write_line("c").code(), errc::io_error);  // stdin is closed
}

TEST(ChildProcessTest, FindsALineByNeedleOnStderrAndInWhatWasAlreadyRead) {
  child_process c = sh("echo 'info: starting' >&2; echo 'error: disk full' >&2; echo done");
  EXPECT_EQ(c.read_line(patience).value(), "done");
  auto hit = c.find_stderr("disk", patience);
  ASSERT_TRUE(hit.ok()) << hit.error().to_string();
  EXPECT_EQ(*hit, "error: disk full");
  EXPECT_EQ(c.find_stderr("starting", patience).value(), "info: starting");  // found again
  EXPECT_EQ(c.find_stdout("do", patience).value(), "done");  // read_line took it, still there
  EXPECT_EQ(c.wait_exit(patience).value(), 0);
  EXPECT_EQ(c.stderr_text(), "info: starting\nerror: disk full\n");
  const auto none = c.find_stderr("warning", patience);
  EXPECT_EQ(none.code(), errc::io_error);  // the output ended without one: no wait
  EXPECT_THAT(none.error().message(), HasSubstr("disk full"));  // errors show stderr's end
}

TEST(ChildProcessTest, ReportsTheExitCodeOrTheSignalPlus128) {
  child_process three = sh("exit 3");
  EXPECT_EQ(three.wait_exit(patience).value(), 3);
  EXPECT_EQ(three.wait_exit(0ms).value(), 3);  // the same answer again
  EXPECT_FALSE(three.running());
  EXPECT_EQ(three.signal(SIGTERM).code(), errc::precondition_failed);

  child_process term = sh("echo ready; read l");
  ASSERT_TRUE(term.find_stdout("ready", patience).ok());
  ASSERT_TRUE(term.signal(SIGTERM).ok());
  EXPECT_EQ(term.wait_exit(patience).value(), 128 + SIGTERM);

  child_process killed = sh("echo ready; read l");
  ASSERT_TRUE(killed.read_line(patience).ok());
  ASSERT_TRUE(killed.signal(SIGKILL).ok());
  EXPECT_EQ(killed.wait_exit(patience).value(), 128 + SIGKILL);
  EXPECT_TRUE(no_child_left());
}

TEST(ChildProcessTest, AWaitPastItsDeadlineIsATimeoutAndLosesNothing) {
  child_process c = sh("read l; echo late; exec sleep 600");
  const auto early = c.read_line(10ms);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.code(), errc::timeout);
  EXPECT_EQ(c.find_stdout("late", 10ms).code(), errc::timeout);
  ASSERT_TRUE(c.write_line("go").ok());
  EXPECT_EQ(c.read_line(patience).value(), "late");
  // Still running at the deadline, and left running.
  EXPECT_EQ(c.wait_exit(0ms).code(), errc::timeout);
  EXPECT_TRUE(c.running());
  ASSERT_TRUE(c.signal(SIGKILL).ok());
  EXPECT_EQ(c.wait_exit(patience).value(), 128 + SIGKILL);
}

TEST(ChildProcessTest, TheDestructorKillsAndReapsARunningChild) {
  pid_t pid = -1;
  {
    child_process c = sh("echo ready; exec sleep 600");
    ASSERT_EQ(c.read_line(patience).value(), "ready");
    pid = c.pid();
  }
  EXPECT_EQ(::kill(pid, 0), -1);  // reaped: the pid is gone
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(no_child_left());
}

TEST(ChildProcessTest, MovesKeepTheChild) {
  std::vector<child_process> children;
  for (int i = 0; i < 3; ++i)
    children.push_back(sh("read l; echo \"$l " + std::to_string(i) + "\""));
  for (auto& c : children) ASSERT_TRUE(c.write_line("hello").ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(children[i].read_line(patience).value(), "hello " + std::to_string(i));
  }
  child_process moved = std::move(children[0]);
  EXPECT_EQ(moved.wait_exit(patience).value(), 0);
  EXPECT_EQ(children[0].wait_exit(patience).code(), errc::precondition_failed);  // empty now
  children.clear();
  EXPECT_TRUE(no_child_left());
}

TEST(ChildProcessTest, AFailedStartIsAnErrorAndLeavesNoChild) {
  const auto missing = child_process::start({"/nonexistent/kvc-child"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.code(), errc::io_error);
  EXPECT_THAT(missing.error().message(), HasSubstr("/nonexistent/kvc-child"));
  EXPECT_EQ(child_process::start({}).code(), errc::invalid_argument);
  EXPECT_TRUE(no_child_left());
}

TEST(ChildProcessTest, TheChildDiesWithTheProcessThatStartedIt) {
  // A middle process starts a child, reports its pid and dies without running any destructor.
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t middle = ::fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    auto c = child_process::start({"/bin/sh", "-c", "exec sleep 600"});
    const pid_t pid = c.ok() ? c->pid() : -1;
    ::_exit(::write(report[1], &pid, sizeof pid) == sizeof pid ? 0 : 1);
  }
  ::close(report[1]);
  pid_t pid = -1;
  ASSERT_EQ(::read(report[0], &pid, sizeof pid), static_cast<ssize_t>(sizeof pid));
  ::close(report[0]);
  int st = 0;
  ASSERT_EQ(::waitpid(middle, &st, 0), middle);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_GT(pid, 0);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    EXPECT_EQ(errno, ESRCH);  // already gone and reaped by its new parent
    return;
  }
  pollfd p{pidfd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(patience).count())), 1);
  ::close(pidfd);
}

}  // namespace
}  // namespace kvc::testing
