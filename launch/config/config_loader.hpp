#pragma once
/// config_loader: reads a launch config from YAML text, applies `--set key.path=value`
/// overrides, fills in the defaults and checks everything before anything starts. Precedence:
/// --set > file > built-in defaults (launch_config.hpp).
///
/// Every problem is reported, not only the first: unknown keys (with a "did you mean" from
/// edit distance), keys given twice in one map (both places named), wrong types, values out of
/// range, and the checks across keys of
/// check_config (launch_plan.hpp). Each error names where the value came from and the key
/// path: "tp4.yaml:7: topology.tensor_parallel: ...", "--set: runtime.port: ...", or the file
/// alone for a default that conflicts with another key. Key paths index lists with brackets
/// (`topology.nodes[1].host`); --set accepts that or dots (`topology.nodes.1.host`).
///
/// Pure: no file or environment access (the caller reads the file and resolves
/// $KVCONNECT_TOKEN). Errors are values; yaml-cpp's exceptions stay inside.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "launch/config/did_you_mean.hpp"
#include "launch/config/launch_config.hpp"
#include "launch/config/launch_plan.hpp"

namespace kvc::launch {

/// The largest config text loaded (1 MiB; the examples hold about 1 KiB). A larger one is
/// refused before parsing: yaml-cpp's tree takes about 1 KiB of memory per key.
inline constexpr size_t max_config_bytes = size_t{1} << 20;

struct config_error {
  std::string location;  ///< "file:line", "file" (a default), or "--set"
  int line = 0;          ///< 1-based line in the file; 0 when none
  std::string key_path;  ///< empty for a syntax error of the whole file
  std::string message;
  /// "location: key_path: message".
  std::string to_string() const;
};

/// The config when `errors` is empty; otherwise every problem found, in file order.
struct loaded_config {
  launch_config config;
  std::vector<config_error> errors;
  bool ok() const noexcept { return errors.empty(); }
};

/// The config's sections, in file order: topology, kv_cache, offload, runtime, workload, observe.
std::span<const std::string_view> config_sections();

/// `text`: the YAML (empty: only defaults and overrides; more than max_config_bytes: one
/// error, nothing parsed). `file_name`: how errors name it.
/// `overrides`: "key.path=value" items, the value read as YAML (`[a, b]` is a list).
/// `use`: which of check_config's checks apply (an embedding engine skips the launch's own).
loaded_config load_config(std::string_view text, std::string_view file_name,
                          std::span<const std::string> overrides,
                          config_use use = config_use::launch);

}  // namespace kvc::launch
