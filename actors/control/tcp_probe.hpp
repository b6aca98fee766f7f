#pragma once
/// probe_tcp: whether a TCP listener answers at host:port within a time limit. CAF 0.17's
/// `io::remote_actor` connects with a blocking connect() and no limit of its own, so a peer
/// behind a host that drops SYNs would hold the caller for the OS's TCP timeout (minutes). The
/// embedding API and the worker process probe first, with their registration timeout; the probe's
/// connection is closed at once (the listener sees a connection that ends before any message,
/// which CAF's middleman ignores).
///
/// Pure function over POSIX sockets; thread-safe.
#include <chrono>
#include <cstdint>
#include <string>

#include "proto/status.hpp"

namespace kvc::control {

/// Success when a connection to host:port (an IPv4/IPv6 literal or a name) was established
/// within `timeout`. errc::timeout when it was not; errc::io_error when it was refused, the name
/// does not resolve or the network is unreachable (the message says which).
status probe_tcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);

/// The same, keeping the connection: a connected, non-blocking socket the caller owns (and
/// closes), or probe_tcp's errors.
result<int> connect_tcp(const std::string& host, uint16_t port,
                        std::chrono::milliseconds timeout);

}  // namespace kvc::control
