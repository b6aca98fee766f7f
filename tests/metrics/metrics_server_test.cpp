// The metrics server against the clients that once starved it (issue 23): an idle connection, a
// keep-alive scraper, hundreds of idle connections, a client sending its request a byte at a
// time. Each test asserts that a scrape is answered while they are connected, or that the
// server closed them; no wait here is bounded by a clock except the CTest timeout.
#include "actors/metrics/metrics_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "tests/support/loopback_socket.hpp"

namespace kvc::metrics {
namespace {

using namespace std::chrono_literals;

const std::string text = "kvc_up 1\n";

/// A connected TCP socket to 127.0.0.1:port; closed by the destructor.
class raw_client {
 public:
  explicit raw_client(uint16_t port)
      : fd_(kvc::testing::connect_loopback(port)), connected_(fd_ >= 0) {}
  ~raw_client() {
    if (fd_ >= 0) ::close(fd_);
  }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  /// Blocks until the server closes the connection; true when it did so without answering.
  bool closed_without_answer() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }
  /// Nothing to read and no end of the connection, right now.
  bool open_and_silent() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
  bool connected_ = false;
};

server_options options(std::chrono::milliseconds request_timeout, size_t max_connections = 64) {
  server_options o;
  o.gate.request_timeout = request_timeout;
  o.gate.max_connections = max_connections;
  return o;
}

std::unique_ptr<metrics_server> start_server(
    const server_options& o, metrics_server::render_fn render = [] { return text; }) {
  auto s = metrics_server::start("127.0.0.1", 0, std::move(render), o);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

::testing::AssertionResult scraped(httplib::Client& c) {
  auto res = c.Get("/metrics");
  if (!res)
    return ::testing::AssertionFailure() << "no answer: " << httplib::to_string(res.error());
  if (res->status != 200 || res->body != text) {
    return ::testing::AssertionFailure() << res->status << " " << res->body;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult scraped(uint16_t port) {
  httplib::Client c("127.0.0.1", port);
  return scraped(c);
}

TEST(MetricsServerTest, AnIdleConnectionDoesNotDelayAScrape) {
  auto server = start_server(options(1h));
  ASSERT_TRUE(server);
  raw_client idle(server->port());
  ASSERT_TRUE(idle.connected());
  EXPECT_TRUE(scraped(server->port()));
  // The scrape did not wait for the idle connection to end: it is still open.
  EXPECT_TRUE(idle.open_and_silent());
}

TEST(MetricsServerTest, AKeepAliveScraperDoesNotBlockASecondScraper) {
  auto server = start_server(options(1h));
  ASSERT_TRUE(server);
  httplib::Client prometheus("127.0.0.1", server->port());
  prometheus.set_keep_alive(true);
  auto res = prometheus.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Connection"), "close");  // nothing held between scrapes
  EXPECT_TRUE(scraped(server->port()));
  EXPECT_TRUE(scraped(prometheus));  // the keep-alive client reconnects
}

TEST(MetricsServerTest, HundredsOfIdleConnectionsDoNotStarveAScrape) {
  constexpr size_t cap = 16;
  auto server = start_server(options(1h, cap));
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<raw_client>> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(std::make_unique<raw_client>(server->port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  EXPECT_TRUE(scraped(server->port()));
  // The scrape took the slot of the oldest idle connection: the server closed those beyond
  // its cap, oldest first, and keeps the newest cap - 1.
  const size_t closed = idle.size() - (cap - 1);
  for (size_t i = 0; i < closed; ++i) EXPECT_TRUE(idle[i]->closed_without_answer()) << i;
  for (size_t i = closed; i < idle.size(); ++i) EXPECT_TRUE(idle[i]->open_and_silent()) << i;
}

// A slow client sends its request a byte whenever the server has not closed the connection
// for a while (the wait is the client's pace, not the test's synchronisation); the server's
// deadline counts from the accept, so the connection ends however often bytes arrive.
TEST(MetricsServerTest, ASlowLorisIsClosedAtItsDeadline) {
  auto server = start_server(options(200ms));
  ASSERT_TRUE(server);
  raw_client loris(server->port());
  ASSERT_TRUE(loris.connected());
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ";
  size_t sent = 0;
  for (;;) {
    pollfd p{loris.fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) != 0) break;  // the server closed it (or wrote, which it must not)
    const char byte = sent < request.size() ? request[sent] : 'a';
    if (!loris.send(std::string(1, byte))) break;
    ++sent;
  }
  EXPECT_TRUE(loris.closed_without_answer());
  EXPECT_TRUE(scraped(server->port()));
}

TEST(MetricsServerTest, ScrapesAreAnsweredWhileABadClientOfEachKindIsConnected) {
  auto server = start_server(options(1h, 32));
  ASSERT_TRUE(server);
  raw_client idle(server->port());
  raw_client loris(server->port());
  ASSERT_TRUE(loris.send("GET /metrics HTTP/1.1\r\nHo"));
  httplib::Client prometheus("127.0.0.1", server->port());
  prometheus.set_keep_alive(true);
  std::vector<std::unique_ptr<raw_client>> flood;
  for (int i = 0; i < 100; ++i) flood.push_back(std::make_unique<raw_client>(server->port()));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(scraped(prometheus)) << i;
    EXPECT_TRUE(scraped(server->port())) << i;
  }
}

TEST(MetricsServerTest, WhenEverySlotIsBeingAnsweredANewConnectionIsClosedAtOnce) {
  std::mutex mu;
  std::condition_variable cv;
  int rendering = 0;
  bool release = false;
  server_options o = options(1h, 2);
  o.threads = 2;
  auto server = start_server(o, [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++rendering;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return text;
  });
  ASSERT_TRUE(server);
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 2; ++i) {
    scrapers.emplace_back([&] { EXPECT_TRUE(scraped(server->port())); });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return rendering == 2; });
  }
  raw_client third(server->port());
  ASSERT_TRUE(third.connected());
  EXPECT_TRUE(third.closed_without_answer());
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& t : scrapers) t.join();
}

TEST(MetricsServerTest, StopClosesTheConnectionsStillWaiting) {
  auto server = start_server(options(1h));
  ASSERT_TRUE(server);
  raw_client idle(server->port());
  ASSERT_TRUE(idle.connected());
  EXPECT_TRUE(scraped(server->port()));  // the idle connection was accepted before it
  server->stop();
  EXPECT_TRUE(idle.closed_without_answer());
  server->stop();  // idempotent
}

TEST(MetricsServerTest, OtherPathsAnswer404) {
  auto server = start_server(options(1h));
  ASSERT_TRUE(server);
  httplib::Client c("127.0.0.1", server->port());
  auto res = c.Get("/other");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(MetricsServerTest, BadOptionsAndAPortInUseAreErrors) {
  server_options o;
  o.threads = 0;
  EXPECT_EQ(metrics_server::start(
                "127.0.0.1", 0, [] { return text; }, o)
                .code(),
            errc::invalid_argument);
  o = {};
  o.gate.max_connections = 0;
  EXPECT_EQ(metrics_server::start(
                "127.0.0.1", 0, [] { return text; }, o)
                .code(),
            errc::invalid_argument);
  auto first = start_server({});
  ASSERT_TRUE(first);
  EXPECT_EQ(metrics_server::start("127.0.0.1", first->port(), [] { return text; }).code(),
            errc::io_error);
}

}  // namespace
}  // namespace kvc::metrics
