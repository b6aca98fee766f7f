#include "actors/channel/transport.hpp"

namespace kvc::channel {

std::string peer_id(rank_id rank, uint32_t incarnation) {
  return "r" + std::to_string(rank) + "." + std::to_string(incarnation);
}

}  // namespace kvc::channel
