#include "actors/channel/zap_handler.hpp"

#include <iterator>
#include <vector>

#include <zmq_addon.hpp>

namespace kvc::channel {

status check_token(const std::string& token, std::string_view what) {
  if (token.empty() || token.size() > 255) {
    return make_error(errc::invalid_argument,
                      std::string(what) +
                          ": the token must be 1 to 255 bytes (ZeroMQ PLAIN password)");
  }
  return {};
}

bool same_secret(std::string_view a, std::string_view b) noexcept {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = i < a.size() ? a[i] : '\0';
    diff |= static_cast<unsigned char>(x ^ b[i]);
  }
  return diff == 0;
}

zap_handler::zap_handler(zmq::context_t& ctx, std::string token, const std::string& stop_endpoint)
    : token_(std::move(token)),
      zap_(ctx, zmq::socket_type::rep),
      stop_tx_(ctx, zmq::socket_type::pair),
      stop_rx_(ctx, zmq::socket_type::pair) {
  zap_.set(zmq::sockopt::linger, 0);
  zap_.bind("inproc://zeromq.zap.01");
  stop_tx_.bind(stop_endpoint);
  stop_rx_.connect(stop_endpoint);
  thread_ = std::thread([this] { serve(); });
}

zap_handler::~zap_handler() {
  stop_tx_.send(zmq::str_buffer("stop"), zmq::send_flags::none);
  thread_.join();
}

void zap_handler::serve() {
  for (;;) {
    zmq::pollitem_t items[] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                               {stop_rx_.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds{-1});
      if (items[1].revents & ZMQ_POLLIN) return;
      if (items[0].revents & ZMQ_POLLIN) answer_one();
    } catch (const zmq::error_t&) {
      return;  // the context is ending
    }
  }
}

/// Request: version, request id, domain, address, routing id, mechanism, credentials...
/// Reply: version, request id, status code, status text, user id, metadata.
void zap_handler::answer_one() {
  std::vector<zmq::message_t> req;
  if (!zmq::recv_multipart(zap_, std::back_inserter(req))) return;
  const bool admit = req.size() == 8 && req[0].to_string_view() == "1.0" &&
                     req[5].to_string_view() == "PLAIN" && req[6].to_string_view() == plain_user &&
                     same_secret(req[7].to_string_view(), token_);
  if (!admit) refused_.fetch_add(1);
  const std::string id = req.size() > 1 ? req[1].to_string() : std::string{};
  std::vector<zmq::const_buffer> reply = {
      zmq::str_buffer("1.0"), zmq::buffer(id),
      admit ? zmq::str_buffer("200") : zmq::str_buffer("400"),
      admit ? zmq::str_buffer("OK") : zmq::str_buffer("not the deployment's token"),
      zmq::str_buffer(""), zmq::str_buffer("")};
  zmq::send_multipart(zap_, reply);
}

}  // namespace kvc::channel
