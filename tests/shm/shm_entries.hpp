#pragma once
/// shm_entries: the /dev/shm entries of this user whose names start with
/// "kvc-<uid>-<instance_prefix>", as segment names ("/kvc-..."). Tests use it to check that a run
/// left no segment behind. Header-only test support.
#include <dirent.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace kvc::shm::testing {

inline std::vector<std::string> shm_entries(const std::string& instance_prefix) {
  const std::string prefix = "kvc-" + std::to_string(::getuid()) + "-" + instance_prefix;
  std::vector<std::string> out;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(dir)) {
      const std::string n = e->d_name;
      if (n.rfind(prefix, 0) == 0) out.push_back("/" + n);
    }
    ::closedir(dir);
  }
  return out;
}

}  // namespace kvc::shm::testing
