#include "shm/stale_segments.hpp"

#include <dirent.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "shm/segment.hpp"

namespace kvc::shm {

result<stale_sweep> remove_stale_segments(uint32_t uid) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/dev/shm"), ::closedir);
  if (!dir) {
    return make_error(errc::io_error, std::string("cannot read /dev/shm: ") + std::strerror(errno));
  }
  const std::string prefix = "kvc-" + std::to_string(uid) + "-";
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir.get())) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      names.push_back("/" + std::string(e->d_name));
    }
  }
  std::sort(names.begin(), names.end());
  stale_sweep out;
  for (const auto& name : names) {
    auto creator = segment::stale_creator(name);
    if (!creator) {
      if (creator.error().code() != errc::not_found) {  // gone meanwhile: nothing to do
        out.problems.push_back(creator.error().to_string());
      }
      continue;
    }
    if (!*creator) continue;  // live, being created, or not ours
    if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
      out.problems.push_back("cannot remove " + name + ": " + std::strerror(errno));
      continue;
    }
    out.removed.push_back({name, **creator});
  }
  return out;
}

result<bool> remove_segment_left_by(std::string_view name, pid_t creator) {
  auto stale = segment::stale_creator(name);
  if (!stale) {
    if (stale.error().code() == errc::not_found) return false;
    return stale.error();
  }
  if (!*stale || **stale != creator) return false;
  const std::string path(name);
  if (::shm_unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return false;
    return make_error(errc::io_error, "cannot remove " + path + ": " + std::strerror(errno));
  }
  return true;
}

}  // namespace kvc::shm
