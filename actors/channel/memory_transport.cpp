#include "actors/channel/memory_transport.hpp"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

namespace kvc::channel {

struct memory_server::hub {
  std::mutex mu;
  std::condition_variable arrived;  // any queue grew
  std::deque<inbound_frame> inbound;
  std::map<std::string, std::deque<wire_bytes>, std::less<>> outbound;  // by connected peer
  bool server_gone = false;

  /// Waits up to `timeout` until `ready()` holds; true when it does.
  template <class Ready>
  bool wait(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout, Ready ready) {
    return ready() || (timeout.count() > 0 && arrived.wait_for(lock, timeout, ready));
  }
};

namespace {

class memory_client final : public client_transport {
 public:
  memory_client(std::shared_ptr<memory_server::hub> hub, std::string peer)
      : hub_(std::move(hub)), peer_(std::move(peer)) {}

  ~memory_client() override {
    std::lock_guard lock{hub_->mu};
    hub_->outbound.erase(peer_);
  }

  status send(std::span<const char> bytes) override {
    {
      std::lock_guard lock{hub_->mu};
      if (hub_->server_gone) {
        return make_error(errc::io_error, "step channel: the scheduler's end is gone");
      }
      hub_->inbound.push_back({peer_, wire_bytes(bytes.begin(), bytes.end())});
    }
    hub_->arrived.notify_all();
    return {};
  }

  result<std::optional<wire_bytes>> receive(std::chrono::milliseconds timeout) override {
    std::unique_lock lock{hub_->mu};
    auto& queue = hub_->outbound[peer_];
    if (!hub_->wait(lock, timeout, [&] { return !queue.empty(); })) {
      return std::optional<wire_bytes>{};
    }
    wire_bytes out = std::move(queue.front());
    queue.pop_front();
    return std::optional<wire_bytes>{std::move(out)};
  }

 private:
  std::shared_ptr<memory_server::hub> hub_;
  std::string peer_;
};

}  // namespace

memory_server::memory_server() : hub_(std::make_shared<hub>()) {}

memory_server::~memory_server() {
  std::lock_guard lock{hub_->mu};
  hub_->server_gone = true;
}

const std::string& memory_server::remote_endpoint() const noexcept {
  static const std::string none;
  return none;
}

result<std::unique_ptr<client_transport>> memory_server::connect_local(const std::string& peer) {
  std::lock_guard lock{hub_->mu};
  if (!hub_->outbound.try_emplace(peer).second) {
    return make_error(errc::invalid_argument, "step channel: peer '" + peer + "' is connected");
  }
  return std::unique_ptr<client_transport>{new memory_client(hub_, peer)};
}

status memory_server::send(std::string_view peer, std::span<const char> bytes) {
  {
    std::lock_guard lock{hub_->mu};
    auto it = hub_->outbound.find(peer);
    if (it == hub_->outbound.end()) {
      return make_error(errc::io_error,
                        "step channel: rank peer '" + std::string{peer} + "' is not connected");
    }
    it->second.emplace_back(bytes.begin(), bytes.end());
  }
  hub_->arrived.notify_all();
  return {};
}

result<std::optional<inbound_frame>> memory_server::receive(std::chrono::milliseconds timeout) {
  std::unique_lock lock{hub_->mu};
  if (!hub_->wait(lock, timeout, [&] { return !hub_->inbound.empty(); })) {
    return std::optional<inbound_frame>{};
  }
  inbound_frame out = std::move(hub_->inbound.front());
  hub_->inbound.pop_front();
  return std::optional<inbound_frame>{std::move(out)};
}

}  // namespace kvc::channel
