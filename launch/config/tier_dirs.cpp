#include "launch/config/tier_dirs.hpp"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvc::launch {

status check_tier_dirs(const launch_config& c) {
  const auto& tiers = c.offload.secondary_tiers;
  for (size_t i = 0; i < tiers.size(); ++i) {
    const std::string key = "offload.secondary_tiers[" + std::to_string(i) + "].";
    const std::string& dir = tiers[i].root_dir;
    auto bad_dir = [&](const std::string& why) {
      return make_error(errc::io_error, key + "root_dir: " + dir + " " + why);
    };
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      return bad_dir(errno == ENOENT ? "does not exist" : std::string{": "} + std::strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return bad_dir("is not a directory");
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) != 0) return bad_dir(std::string{": "} + std::strerror(errno));
    if ((fs.f_flag & ST_RDONLY) != 0) return bad_dir("is on a read-only file system");
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      return bad_dir("is not writable: " + std::string{std::strerror(errno)});
    }
    const uint64_t fs_bytes = uint64_t{fs.f_blocks} * fs.f_frsize;
    if (fs_bytes < tiers[i].capacity_bytes) {
      return make_error(errc::capacity_exhausted,
                        key + "capacity_bytes: " + std::to_string(tiers[i].capacity_bytes) +
                            " bytes do not fit the file system of " + dir + " (" +
                            std::to_string(fs_bytes) + " bytes)");
    }
  }
  return status::success();
}

}  // namespace kvc::launch
