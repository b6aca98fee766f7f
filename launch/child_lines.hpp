#pragma once
/// child_lines: what a launch shows on stderr of its children's JSON lines (the scheduler's and
/// the workers' stdout, which the launcher reads): one short sentence per line at log level info,
/// so that a run reads as a story rather than a wall of numbers; the raw line only at debug
/// (docs/config.md). The figures themselves reach the launcher's own stdout (its summary and
/// fault report) and its table.
///
/// Pure functions; thread-safe.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kvc::launch {

/// The sentence for a child's line `line` (parsed: `j`, not an object when it is no JSON):
/// std::nullopt for the lines a launch never relays at info (per-step progress, the ranks'
/// connector times, the simulated run's finished requests); an unknown event or a line that is no JSON comes back as it is.
std::optional<std::string> child_line_text(const nlohmann::json& j, const std::string& line);

}  // namespace kvc::launch
