#pragma once
/// The edge between a config file on disk and the pure loader (config_loader.hpp): reads the
/// file and loads it with the --set overrides. An empty path loads the embedded default (one
/// node, TP=2, PP=1, sim; errors then name "<default>"); `-` reads standard input (errors name
/// "<stdin>": how `kvconnect launch` hands its children their config). A path that is not a
/// readable regular file (missing, a directory, a device) or holds more than max_config_bytes
/// is one config_error naming it, and nothing is parsed. Used by `kvconnect config`, `launch`,
/// `soak` and the role processes' --config.
#include <span>
#include <string>

#include "launch/config/config_loader.hpp"

namespace kvc::launch {

loaded_config load_config_file(const std::string& path, std::span<const std::string> overrides);

/// Prints the errors of `loaded` on stderr, one line each ("kvconnect <who>: " first): the first
/// 20, then "... and N more", then the count.
void print_config_errors(const loaded_config& loaded, const std::string& who);

}  // namespace kvc::launch
