#pragma once
/// private_files: where kvconnect writes what a run leaves on disk (trace files, run records:
/// request ids, block hashes, timings). Like the shm segment (mode 0600), they are the owner's
/// alone: directories kvconnect creates are 0700, files 0600 (the process's umask can only take
/// more away). An existing directory is used as it is.
/// Free functions; thread-safe (they act on the file system only).
#include <string>

#include "proto/status.hpp"

namespace kvc {

/// Creates `dir` and the parents it lacks, each with mode 0700; an existing directory is fine.
/// errc::io_error naming the directory and why when it cannot be made or is not a directory
/// (a file in the way, no permission, a symlink loop).
status make_private_dir(const std::string& dir);

/// Creates (or truncates) the file `path` with mode 0600 (an existing file's mode is set to
/// 0600 too) and returns its descriptor, open for writing, close-on-exec; the caller owns it.
/// errc::io_error naming the path and why.
result<int> create_private_file(const std::string& path);

}  // namespace kvc
