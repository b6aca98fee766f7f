#include "actors/embed/actor_host.hpp"

#include <cstddef>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/control/system_config.hpp"

namespace kvc::embed {

std::shared_ptr<actor_host> actor_host::start(const network_config& net, bool network) {
  std::shared_ptr<actor_host> h{new actor_host()};
  control::system_options opts;
  opts.max_threads = net.actor_threads;
  opts.heartbeat_interval = net.heartbeat_interval;
  opts.connection_timeout = net.connection_timeout;
  opts.bind_address = net.host;
  h->cfg_ = std::make_unique<caf::actor_system_config>();
  control::configure(*h->cfg_, opts, network);
  // Deserialise incoming messages in CAF's network thread instead of handing each one to a
  // BASP worker thread first: the control messages are small, and every hand-off between
  // threads is a wake-up (one per message and process; bench step).
  h->cfg_->set("middleman.workers", size_t{0});
  h->sys_ = std::make_unique<caf::actor_system>(*h->cfg_);
  h->network_ = network;
  return h;
}

actor_host::~actor_host() = default;

}  // namespace kvc::embed
