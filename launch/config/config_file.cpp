#include "launch/config/config_file.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

namespace kvc::launch {

namespace {

/// The errors printed before "... and N more": enough to fix a file by, never a flood.
constexpr size_t shown_errors = 20;

/// Reads the config file at `path` into `text`; why it cannot be a config file otherwise. A
/// directory or a device would read as nothing (the defaults) or forever, and a file larger than
/// max_config_bytes is refused before it is read.
std::string read_config_text(const std::string& path, std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec) return "cannot read the file: " + ec.message();
  if (fs::is_directory(st)) return "is a directory, not a config file";
  if (!fs::is_regular_file(st)) return "is not a regular file, so not a config file";
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return "cannot read the file: " + ec.message();
  auto too_large = [](uintmax_t bytes) {
    return "is " + std::to_string(bytes) + " bytes: a config file is at most " +
           std::to_string(max_config_bytes) + " bytes (1 MiB)";
  };
  if (size > max_config_bytes) return too_large(size);
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read the file: " + std::string(std::strerror(errno));
  text.resize(max_config_bytes + 1);  // one byte more tells a file that grew since
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) return "cannot read the file";
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > max_config_bytes) return too_large(text.size());
  return "";
}

/// Reads standard input to its end into `text` (at most max_config_bytes).
std::string read_stdin_text(std::string& text) {
  text.resize(max_config_bytes + 1);
  std::cin.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (std::cin.bad()) return "cannot read standard input";
  text.resize(static_cast<size_t>(std::cin.gcount()));
  if (text.size() > max_config_bytes) {
    return "holds more than a config file may: at most " + std::to_string(max_config_bytes) +
           " bytes (1 MiB)";
  }
  return "";
}

}  // namespace

loaded_config load_config_file(const std::string& path, std::span<const std::string> overrides) {
  if (path.empty()) return load_config("", "<default>", overrides);
  const bool from_stdin = path == "-";
  std::string text;
  if (std::string problem = from_stdin ? read_stdin_text(text) : read_config_text(path, text);
      !problem.empty()) {
    loaded_config out;
    out.errors.push_back({from_stdin ? "<stdin>" : path, 0, "", std::move(problem)});
    return out;
  }
  return load_config(text, from_stdin ? "<stdin>" : path, overrides);
}

void print_config_errors(const loaded_config& loaded, const std::string& who) {
  const size_t count = loaded.errors.size();
  const size_t shown = std::min(count, shown_errors);
  for (size_t i = 0; i < shown; ++i) {
    std::cerr << "kvconnect " << who << ": " << loaded.errors[i].to_string() << "\n";
  }
  if (count > shown) std::cerr << "kvconnect " << who << ": ... and " << count - shown << " more\n";
  std::cerr << "kvconnect " << who << ": " << count << (count == 1 ? " error" : " errors")
            << " in the config\n";
}

}  // namespace kvc::launch
