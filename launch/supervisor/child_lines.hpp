#pragma once
/// child_lines: what a launch shows on stderr of its children's JSON lines (the scheduler's and
/// the workers' stdout, which the launcher reads as child_events): one short sentence per line
/// at log level info, so that a run reads as a story rather than a wall of numbers; the raw line
/// only at debug (docs/config.md). The figures themselves reach the launcher's own stdout (its
/// summary and fault report) and its table.
///
/// Pure functions; thread-safe.
#include <optional>
#include <string>

#include "launch/roles/child_events.hpp"

namespace kvc::launch {

/// The sentence for a child's event: std::nullopt for the lines a launch never relays at info
/// (per-step progress, the ranks' connector times, the simulated run's finished requests).
std::optional<std::string> child_line_text(const child_event& event);

/// The same for a line as it came (`parsed`: parse_child_line's answer): a line that is no
/// event of the protocol (no JSON, an unknown event, a field it cannot read) comes back as it
/// is.
std::optional<std::string> child_line_text(const result<child_event>& parsed,
                                           const std::string& line);

}  // namespace kvc::launch
