#include "launch/config/did_you_mean.hpp"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <vector>

namespace kvc::launch {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_name(std::string_view name, std::span<const std::string_view> candidates) {
  const size_t limit = std::max<size_t>(2, name.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
  };
  const std::string lowered = lower(name);
  for (auto c : candidates) {
    // The distance is at least the difference in length: a long name (a pasted blob) costs
    // nothing beyond that comparison.
    const size_t gap = name.size() > c.size() ? name.size() - c.size() : c.size() - name.size();
    if (gap >= best_d) continue;
    const size_t d = edit_distance(lowered, lower(c));
    if (d < best_d) {
      best_d = d;
      best = std::string(c);
    }
  }
  return best;
}

}  // namespace kvc::launch
