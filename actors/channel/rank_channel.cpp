#include "actors/channel/rank_channel.hpp"

#include <utility>

namespace kvc::channel {

result<std::unique_ptr<rank_channel>> rank_channel::open(
    std::unique_ptr<client_transport> transport, const wire_hello& hello) {
  if (!transport) return make_error(errc::invalid_argument, "step channel: no transport");
  if (auto st = transport->send(encode(hello)); !st) return st;
  return std::unique_ptr<rank_channel>{new rank_channel(std::move(transport))};
}

result<std::optional<connector_metadata>> rank_channel::next_step(
    std::chrono::milliseconds timeout) {
  auto frame = transport_->receive(timeout);
  if (!frame) return frame.error();
  if (!*frame) return std::optional<connector_metadata>{};
  auto meta = decode_metadata(**frame);
  if (!meta) return meta.error();
  return std::optional<connector_metadata>{std::move(meta).value()};
}

status rank_channel::send_report(const step_report& report) {
  return transport_->send(encode(report));
}

}  // namespace kvc::channel
