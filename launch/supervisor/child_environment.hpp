#pragma once
/// child_environment: what a launch hands its children besides their config: the environment
/// with the shared token ($KVCONNECT_TOKEN: other users can read a command line, not another
/// user's environment) and the log level ($SPDLOG_LEVEL = runtime.log_level), and the token a
/// one-node launch makes up when none is given.
///
/// Free functions; generate_token reads std::random_device, child_environment the process's
/// environment.
#include <string>
#include <vector>

namespace kvc::launch {

/// 32 random hex digits.
std::string generate_token();

/// The launcher's environment with KVCONNECT_TOKEN and SPDLOG_LEVEL (`level`) set.
std::vector<std::string> child_environment(const std::string& token, const std::string& level);

}  // namespace kvc::launch
