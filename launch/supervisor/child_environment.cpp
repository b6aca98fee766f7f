#include "launch/supervisor/child_environment.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

extern char** environ;

namespace kvc::launch {

std::string generate_token() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  const uint64_t w = (uint64_t{rd()} << 32) ^ rd();
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(w));
  return buf;
}

/// The launcher's environment with KVCONNECT_TOKEN and SPDLOG_LEVEL (runtime.log_level) set.
std::vector<std::string> child_environment(const std::string& token, const std::string& level) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KVCONNECT_TOKEN=", 16) != 0 &&
        std::strncmp(*e, "SPDLOG_LEVEL=", 13) != 0) {
      env.emplace_back(*e);
    }
  }
  env.push_back("KVCONNECT_TOKEN=" + token);
  env.push_back("SPDLOG_LEVEL=" + level);
  return env;
}

}  // namespace kvc::launch
