#pragma once
/// open_node_pool: the node's CPU pool segment for one side of a deployment. Without
/// pool.create_or_attach the scheduler side creates it and a worker attaches it. With it, the
/// first process of the node creates it and the others attach it (shm::segment::
/// create_or_attach); one that finds it half-created (its creator still writing the header, or
/// gone between two looks) tries again until `deadline`. Internal to actors/embed; thread-safe.
#include <chrono>
#include <string>

#include "actors/embed/embed_config.hpp"
#include "proto/status.hpp"
#include "shm/segment.hpp"

namespace kvc::embed {

/// Which side opens the pool: the scheduler creates it (unless create_or_attach lets it
/// attach), a worker attaches it (unless create_or_attach lets it create it).
enum class pool_side : uint8_t { scheduler, worker };

/// The segment `name` of `geometry` for `side`; segment::create / attach / create_or_attach's
/// errors (errc::not_ready when a half-created segment stayed so until `deadline`).
result<shm::segment> open_node_pool(const std::string& name, const shm::pool_geometry& geometry,
                                    const pool_config& pool, pool_side side,
                                    std::chrono::steady_clock::time_point deadline);

}  // namespace kvc::embed
