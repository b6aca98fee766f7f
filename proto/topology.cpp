#include "proto/topology.hpp"

#include <string>

namespace kvc {

status validate(const topology& t) {
  if (t.tp_size == 0 || t.pp_size == 0 || uint64_t{t.tp_size} * t.pp_size > max_world_size) {
    return make_error(errc::invalid_argument,
                      "tp_size and pp_size must be >= 1 with tp_size * pp_size <= " +
                          std::to_string(max_world_size) + ", got tp_size " +
                          std::to_string(t.tp_size) + " and pp_size " + std::to_string(t.pp_size));
  }
  return status::success();
}

}  // namespace kvc
