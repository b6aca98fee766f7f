#include "launch/process/spawned_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvc::launch {

namespace {

status sys_error(const std::string& what, int e) {
  return make_error(errc::io_error, what + ": " + std::strerror(e));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int wait_code(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 1;
}

/// Between fork and exec only async-signal-safe calls: the launcher has a signal thread.
[[noreturn]] void exec_child(char* const* argv, char* const* envp, pid_t parent, int out_w,
                             int in, int report_w) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher is already gone
  if (::dup2(out_w, STDOUT_FILENO) < 0) ::_exit(127);
  if (in >= 0 && ::dup2(in, STDIN_FILENO) < 0) ::_exit(127);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::execve(argv[0], argv, envp);
  const int e = errno;
  (void)!::write(report_w, &e, sizeof e);
  ::_exit(127);
}

/// An anonymous in-memory file holding `text`, positioned at its start (close-on-exec: the
/// child gets it as its stdin only).
result<int> input_file(const std::string& text) {
  const int fd = ::memfd_create("kvconnect-input", MFD_CLOEXEC);
  if (fd < 0) return sys_error("memfd_create", errno);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return sys_error("write", e);
    }
    done += static_cast<size_t>(n);
  }
  if (::lseek(fd, 0, SEEK_SET) < 0) {
    const int e = errno;
    ::close(fd);
    return sys_error("lseek", e);
  }
  return fd;
}

}  // namespace

result<spawned_process> spawned_process::start(const std::vector<std::string>& argv,
                                               const std::vector<std::string>& env,
                                               const std::optional<std::string>& input) {
  if (argv.empty()) return make_error(errc::invalid_argument, "spawn: empty argv");
  int in = -1;
  if (input) {
    auto f = input_file(*input);
    if (!f) return f.error();
    in = *f;
  }
  // The child has its own copy of the descriptor: the launcher's closes when start returns.
  struct closer {
    int& fd;
    ~closer() { close_fd(fd); }
  } close_in{in};
  int out[2] = {-1, -1};
  int report[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) < 0) return sys_error("pipe", errno);
  if (::pipe2(report, O_CLOEXEC) < 0) {
    const int e = errno;
    close_fd(out[0]);
    close_fd(out[1]);
    return sys_error("pipe", e);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int* fd : {&out[0], &out[1], &report[0], &report[1]}) close_fd(*fd);
    return sys_error("fork", e);
  }
  if (pid == 0) exec_child(args.data(), envp.data(), parent, out[1], in, report[1]);
  close_fd(out[1]);
  close_fd(report[1]);
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close_fd(report[0]);
  if (n > 0) {
    wait_code(pid);
    close_fd(out[0]);
    return sys_error("exec " + argv[0], exec_errno);
  }
  spawned_process p;
  p.pid_ = pid;
  p.out_ = out[0];
  p.pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (p.pidfd_ < 0) {
    const int e = errno;
    ::kill(pid, SIGKILL);
    wait_code(pid);
    p.pid_ = -1;
    return sys_error("pidfd_open", e);
  }
  return p;
}

spawned_process::spawned_process(spawned_process&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      pidfd_(std::exchange(o.pidfd_, -1)),
      out_(std::exchange(o.out_, -1)),
      exit_code_(std::exchange(o.exit_code_, std::nullopt)) {}

spawned_process& spawned_process::operator=(spawned_process&& o) noexcept {
  if (this != &o) {
    release();
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::exchange(o.pidfd_, -1);
    out_ = std::exchange(o.out_, -1);
    exit_code_ = std::exchange(o.exit_code_, std::nullopt);
  }
  return *this;
}

spawned_process::~spawned_process() {
  release();
}

void spawned_process::release() noexcept {
  if (running()) {
    ::kill(pid_, SIGKILL);
    exit_code_ = wait_code(pid_);
  }
  close_fd(out_);
  close_fd(pidfd_);
  pid_ = -1;
}

void spawned_process::close_stdout() {
  close_fd(out_);
}

status spawned_process::signal(int sig) {
  if (!running()) return make_error(errc::precondition_failed, "the process has ended");
  if (::kill(pid_, sig) < 0) return sys_error("kill", errno);
  return status::success();
}

int spawned_process::reap() {
  if (!exit_code_ && pid_ > 0) exit_code_ = wait_code(pid_);
  return exit_code_.value_or(1);
}

}  // namespace kvc::launch
