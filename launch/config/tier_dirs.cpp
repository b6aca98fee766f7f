#include "launch/config/tier_dirs.hpp"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "actors/embed/embed_config.hpp"
#include "disk/block_file.hpp"

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

namespace {

/// Bytes the files under `dir` take on disk (allocated blocks); 0 when it does not exist.
result<uint64_t> bytes_held_under(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (ec) return make_error(errc::io_error, dir + ": " + ec.message());
    return uint64_t{0};
  }
  uint64_t held = 0;
  for (fs::recursive_directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      held += uint64_t(st.st_blocks) * 512;
    }
  }
  if (ec) return make_error(errc::io_error, dir + ": " + ec.message());
  return held;
}

}  // namespace

status check_tier_space(const launch_plan& plan, std::span<const rank_id> ranks) {
  if (ranks.empty() || !plan.workers.at(ranks.front()).file_tier) return status::success();
  const std::string key = "offload.secondary_tiers[0].";
  const auto& first = plan.workers.at(ranks.front());
  const embed::file_tier_config& tier = *first.file_tier;
  const std::string run_dir =
      tier.root_dir + "/" +
      disk::digest_of(
          embed::tier_run_description(tier, first.pool, first.topology, first.block_size_factor))
          .hex();
  uint64_t held = 0;
  for (rank_id r : ranks) {
    auto bytes = bytes_held_under(run_dir + "/" + std::to_string(r));
    if (!bytes) return make_error(errc::io_error, key + "root_dir: " + bytes.error().message());
    held += *bytes;
  }
  struct statvfs fs {};
  if (::statvfs(tier.root_dir.c_str(), &fs) != 0) {
    return make_error(errc::io_error,
                      key + "root_dir: " + tier.root_dir + ": " + std::strerror(errno));
  }
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  const uint64_t needed = tier.capacity_bytes * ranks.size();
  if (free_bytes + held < needed) {
    return make_error(
        errc::capacity_exhausted,
        key + "capacity_bytes: " + std::to_string(tier.capacity_bytes) + " bytes for each of the " +
            std::to_string(ranks.size()) + " ranks here need " + std::to_string(needed) +
            " bytes; the file system of " + tier.root_dir + " has " + std::to_string(free_bytes) +
            " bytes free and this run's files hold " + std::to_string(held));
  }
  return status::success();
}

}  // namespace kvc::launch
