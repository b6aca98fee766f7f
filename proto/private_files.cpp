#include "proto/private_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvc {

namespace {

status cannot_create_dir(const std::string& dir, const std::string& why) {
  return make_error(errc::io_error, "cannot create the directory " + dir + ": " + why);
}

/// Whether `part` is `dir` itself rather than one of its parents.
bool is_itself(const std::filesystem::path& part, const std::string& dir) {
  auto whole = std::filesystem::path{dir}.lexically_normal();
  if (!whole.has_filename()) whole = whole.parent_path();  // a trailing slash
  return part.lexically_normal() == whole;
}

}  // namespace

status make_private_dir(const std::string& dir) {
  if (dir.empty()) return cannot_create_dir(dir, "no directory named");
  std::filesystem::path prefix;
  for (const auto& part : std::filesystem::path{dir}) {
    prefix /= part;
    if (part.empty() || part == "/" || part == "." || part == "..") continue;
    if (::mkdir(prefix.c_str(), 0700) == 0 || errno == EEXIST) continue;
    const std::string why = std::strerror(errno);
    return cannot_create_dir(dir, is_itself(prefix, dir) ? why : prefix.string() + ": " + why);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return cannot_create_dir(dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return cannot_create_dir(dir, "a file of that name is in the way");
  return status::success();
}

result<int> create_private_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return make_error(errc::io_error, "cannot create " + path + ": " + std::strerror(errno));
  }
  if (::fchmod(fd, 0600) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(errc::io_error,
                      "cannot make " + path + " private (mode 0600): " + std::strerror(e));
  }
  return fd;
}

}  // namespace kvc
