#include "actors/embed/node_pool.hpp"

#include <thread>

namespace kvc::embed {

namespace {

/// How often a half-created segment is looked at again: its creator writes the header right
/// after reserving the pages, so the wait is short.
constexpr std::chrono::milliseconds retry_slice{2};

}  // namespace

result<shm::segment> open_node_pool(const std::string& name, const shm::pool_geometry& geometry,
                                    const pool_config& pool, pool_side side,
                                    std::chrono::steady_clock::time_point deadline) {
  const shm::create_options opts{.prefault = side == pool_side::scheduler && pool.prefault,
                                 .remove_on_close = true};
  if (!pool.create_or_attach) {
    if (side == pool_side::scheduler) return shm::segment::create(name, geometry, opts);
    return shm::segment::attach(name, &geometry);
  }
  for (;;) {
    auto seg = shm::segment::create_or_attach(name, geometry, opts);
    if (seg || (seg.code() != errc::not_ready && seg.code() != errc::not_found)) return seg;
    if (std::chrono::steady_clock::now() >= deadline) return seg;
    std::this_thread::sleep_for(retry_slice);
  }
}

}  // namespace kvc::embed
