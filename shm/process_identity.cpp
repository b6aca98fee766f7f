#include "shm/process_identity.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace kvc::shm {
namespace {

struct stat_fields {
  char state = '?';
  uint64_t start_time = 0;
};

/// Parses /proc/<pid>/stat. The command name (field 2) may hold spaces and parentheses, so the
/// fields after it are counted from the last ')'.
result<stat_fields> read_stat(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  if (!in) return make_error(errc::not_found, "no process " + std::to_string(pid));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto close = text.rfind(')');
  if (close == std::string::npos) return make_error(errc::io_error, "cannot parse " + path);
  std::istringstream rest(text.substr(close + 1));
  stat_fields out;
  rest >> out.state;  // field 3
  std::string field;
  for (int i = 4; i < 22 && rest >> field; ++i) {
  }
  if (!(rest >> out.start_time)) return make_error(errc::io_error, "cannot parse " + path);
  return out;
}

}  // namespace

result<uint64_t> process_start_time(pid_t pid) {
  if (pid <= 0) return make_error(errc::invalid_argument, "pid must be > 0");
  auto f = read_stat(pid);
  if (!f) return f.error();
  return f->start_time;
}

bool process_alive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  auto f = read_stat(pid);
  if (!f) return false;
  if (f->state == 'Z' || f->state == 'X') return false;  // exited, not yet reaped
  return f->start_time == start_time;
}

}  // namespace kvc::shm
