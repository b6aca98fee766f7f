#include "launch/trace/clock_offsets.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <utility>

namespace kvc::launch {

std::vector<int64_t> estimate_offsets(uint32_t processes, std::span<const message_pair> pairs,
                                      uint32_t reference, std::vector<int64_t> initial) {
  std::vector<int64_t> offset = std::move(initial);
  offset.resize(processes, 0);
  if (reference >= processes) return offset;

  // Smallest (recv - send) per ordered pair of processes.
  std::map<std::pair<uint32_t, uint32_t>, int64_t> least;
  for (const auto& p : pairs) {
    if (p.sender >= processes || p.receiver >= processes || p.sender == p.receiver) continue;
    const int64_t d = p.recv_ns - p.send_ns;
    auto [it, fresh] = least.try_emplace({p.sender, p.receiver}, d);
    if (!fresh) it->second = std::min(it->second, d);
  }
  // θ(a, b) = clock_b - clock_a for every linked pair (both orders).
  auto theta = [&](uint32_t a, uint32_t b) -> std::optional<int64_t> {
    auto ab = least.find({a, b});
    auto ba = least.find({b, a});
    if (ab != least.end() && ba != least.end()) return (ab->second - ba->second) / 2;
    if (ab != least.end()) return ab->second;
    if (ba != least.end()) return -ba->second;
    return std::nullopt;
  };

  std::vector<bool> placed(processes, false);
  placed[reference] = true;
  offset[reference] = 0;
  std::deque<uint32_t> queue{reference};
  while (!queue.empty()) {
    const uint32_t a = queue.front();
    queue.pop_front();
    for (uint32_t b = 0; b < processes; ++b) {
      if (placed[b]) continue;
      auto t = theta(a, b);
      if (!t) continue;
      // t_ref = t_a + offset[a] and t_a = t_b - θ.
      offset[b] = offset[a] - *t;
      placed[b] = true;
      queue.push_back(b);
    }
  }
  return offset;
}

}  // namespace kvc::launch
