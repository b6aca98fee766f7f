#pragma once
/// "Did you mean": the names close enough to a misspelt one to suggest it (config keys and
/// values). Pure functions; thread-safe.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kvc::launch {

/// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(std::string_view a, std::string_view b);
/// The candidate closest to `name`, ignoring case, when it is close enough to be a typo
/// (distance <= 2, or a third of the name's length for longer names); empty otherwise.
std::string closest_name(std::string_view name, std::span<const std::string_view> candidates);

}  // namespace kvc::launch
