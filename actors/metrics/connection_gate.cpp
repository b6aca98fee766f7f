#include "actors/metrics/connection_gate.hpp"

#include <algorithm>
#include <cassert>
#include <utility>

namespace kvc::metrics {

namespace {
constexpr std::string_view head_end = "\r\n\r\n";
}

connection_gate::admission connection_gate::admit(int id, time_point now, size_t answering) {
  admission a;
  if (waiting_.size() + answering >= limits_.max_connections) {
    if (waiting_.empty()) return a;  // every slot is being answered: refused
    a.evicted = waiting_.front().id;
    waiting_.erase(waiting_.begin());
  }
  waiting_.push_back({id, now + limits_.request_timeout, {}});
  a.admitted = true;
  return a;
}

connection_gate::head connection_gate::append(int id, std::string_view bytes) {
  entry* e = find(id);
  assert(e && "append on a connection that does not wait");
  // Search only where the end can be: it may straddle the old and the new bytes.
  const size_t from =
      e->received.size() < head_end.size() - 1 ? 0 : e->received.size() - (head_end.size() - 1);
  e->received.append(bytes);
  const size_t end = e->received.find(head_end, from);
  if (end != std::string::npos && end + head_end.size() <= limits_.max_head_bytes) {
    return head::complete;
  }
  return e->received.size() >= limits_.max_head_bytes ? head::too_large : head::incomplete;
}

connection_gate::ready connection_gate::dispatch(int id) {
  auto it =
      std::find_if(waiting_.begin(), waiting_.end(), [id](const entry& e) { return e.id == id; });
  assert(it != waiting_.end() && "dispatch of a connection that does not wait");
  ready r{std::move(it->received), it->deadline};
  waiting_.erase(it);
  return r;
}

void connection_gate::drop(int id) {
  std::erase_if(waiting_, [id](const entry& e) { return e.id == id; });
}

std::vector<int> connection_gate::expired(time_point now) const {
  std::vector<int> out;
  for (const auto& e : waiting_) {
    if (e.deadline <= now) out.push_back(e.id);
  }
  return out;
}

std::optional<connection_gate::time_point> connection_gate::next_deadline() const {
  if (waiting_.empty()) return std::nullopt;
  return std::min_element(waiting_.begin(), waiting_.end(),
                          [](const entry& a, const entry& b) { return a.deadline < b.deadline; })
      ->deadline;
}

std::vector<int> connection_gate::waiting() const {
  std::vector<int> out;
  out.reserve(waiting_.size());
  for (const auto& e : waiting_) out.push_back(e.id);
  return out;
}

connection_gate::entry* connection_gate::find(int id) {
  for (auto& e : waiting_) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

}  // namespace kvc::metrics
