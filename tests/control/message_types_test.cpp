// Proves that every control-plane message crosses a process boundary intact: each goes
// through CAF's binary serializer and back inside a caf::message (which is what the
// middleman sends: type *names* plus payload, rebuilt from the names on the receiving side).
#include "actors/control/system_config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/message.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/control/atoms.hpp"
#include "actors/control/error_bridge.hpp"
#include "actors/control/interfaces.hpp"
#include "tests/control/deterministic_fixture.hpp"

namespace kvc::control {
namespace {

class MessageTypesTest : public test_support::deterministic_actor_test {
 protected:
  template <class T>
  T round_trip(const T& x) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys(), buf};
    T copy = x;
    auto err = sink(copy);
    EXPECT_FALSE(err) << sys().render(err);
    EXPECT_FALSE(buf.empty());
    caf::binary_deserializer source{sys(), buf};
    T y{};
    err = source(y);
    EXPECT_FALSE(err) << sys().render(err);
    EXPECT_EQ(source.remaining(), 0u);
    return y;
  }
};

TEST_F(MessageTypesTest, EveryInterfaceMessageRoundTripsAsACafMessage) {
  auto check = [&](const caf::message& msg) {
    caf::message back = round_trip(msg);
    EXPECT_EQ(to_string(back), to_string(msg));
    return back;
  };
  // coordinator_actor
  check(caf::make_message(rank_up_atom::value, rank_id{1}, uint32_t{7}));
  check(caf::make_message(rank_down_atom::value, rank_id{1}));
  // scheduler_actor's hello, worker_actor's stop
  worker_registration reg{.protocol_version = protocol_version, .rank = 3, .tp_size = 4,
                          .pp_size = 1, .tp_rank = 3, .segment = "/kvc-0-x-node0",
                          .layout_checksum = 99, .token = "t", .pid = 12};
  auto hello = check(caf::make_message(hello_atom::value, reg));
  EXPECT_EQ(hello.get_as<worker_registration>(1), reg);
  check(caf::make_message(stop_atom::value));
  check(caf::make_message(ready_atom::value));
}

worker_actor::behavior_type idle_worker(worker_actor::pointer) {
  return {[](stop_atom) {}};
}

TEST_F(MessageTypesTest, ActorHandlesRoundTripInsideMessages) {
  worker_actor w = spawn(idle_worker);
  auto back = round_trip(caf::make_message(hello_atom::value, rank_id{0}, uint32_t{1}, w));
  ASSERT_TRUE((back.match_elements<hello_atom, rank_id, uint32_t, worker_actor>()));
  EXPECT_EQ(back.get_as<worker_actor>(3), w);
}

TEST_F(MessageTypesTest, InterfacesUseOnlyRegisteredNames) {
  // Across processes CAF compares these strings; an unregistered type shows up as invalid.
  auto check = [&](const caf::actor_system::mpi& sigs, const char* must_mention) {
    bool mentioned = false;
    for (const std::string& sig : sigs) {
      EXPECT_EQ(sig.find("invalid"), std::string::npos) << sig;
      mentioned = mentioned || sig.find(must_mention) != std::string::npos;
    }
    EXPECT_TRUE(mentioned) << must_mention;
  };
  check(sys().message_types<coordinator_actor>(), "kvc_rankup");
  check(sys().message_types<worker_actor>(), "kvc_stop");
  check(sys().message_types<scheduler_actor>(), "kvc::worker_registration");
  check(sys().message_types<scheduler_actor>(), "kvc::worker_actor");
  check(sys().message_types<scheduler_actor>(), "kvc::coordinator_actor");
  EXPECT_EQ(sys().message_types<coordinator_actor>().size(), 2u);
  EXPECT_EQ(sys().message_types<scheduler_actor>().size(), 1u);
}

TEST_F(MessageTypesTest, ErrcConvertsToCafErrorsAndBack) {
  caf::error e = to_caf_error(make_error(errc::timeout, "job 7 after 30 s"));
  EXPECT_EQ(e.category(), error_category);
  EXPECT_EQ(e.code(), static_cast<uint8_t>(errc::timeout));
  EXPECT_EQ(sys().render(e), "kvc: timeout (job 7 after 30 s)");
  EXPECT_EQ(to_status(e), make_error(errc::timeout, "job 7 after 30 s"));
  // A kvc error survives the wire (request handlers answer with caf::error).
  EXPECT_EQ(to_status(round_trip(e)), make_error(errc::timeout, "job 7 after 30 s"));

  caf::error implicit = errc::shm_error;  // CAF_ERROR_CODE_ENUM
  EXPECT_EQ(to_status(implicit), make_error(errc::shm_error, ""));
  EXPECT_FALSE(to_caf_error(status::success()));
  EXPECT_TRUE(to_status(caf::error{}).ok());
}

TEST_F(MessageTypesTest, CafErrorsMapToTheNearestErrc) {
  EXPECT_EQ(to_status(caf::make_error(caf::sec::request_timeout)).code(), errc::timeout);
  EXPECT_EQ(to_status(caf::make_error(caf::sec::cannot_connect_to_node)).code(), errc::io_error);
  EXPECT_EQ(to_status(caf::make_error(caf::sec::unexpected_actor_messaging_interface)).code(),
            errc::protocol_mismatch);
  EXPECT_EQ(to_status(caf::make_error(caf::sec::unexpected_message)).code(),
            errc::invalid_argument);
  EXPECT_EQ(to_status(caf::make_error(caf::sec::bad_function_call)).code(), errc::internal);
  status down = to_status(caf::make_error(caf::exit_reason::remote_link_unreachable));
  EXPECT_EQ(down.code(), errc::io_error);
  EXPECT_NE(down.message().find("remote_link_unreachable"), std::string::npos) << down.message();
}

TEST(RuntimePresetTest, SetsSchedulerAndMiddlemanOptions) {
  caf::actor_system_config cfg;
  system_options opts;
  opts.max_threads = 3;
  opts.connection_timeout = std::chrono::milliseconds{750};
  apply_preset(cfg, opts);
  EXPECT_EQ(caf::get_or(cfg, "scheduler.policy", caf::atom("none")), caf::atom("sharing"));
  EXPECT_EQ(caf::get_or(cfg, "scheduler.max-threads", size_t{0}), 3u);
  EXPECT_EQ(caf::get_or(cfg, "middleman.heartbeat-interval", caf::timespan{0}),
            caf::timespan{std::chrono::milliseconds{100}});
  EXPECT_EQ(caf::get_or(cfg, "middleman.connection-timeout", caf::timespan{0}),
            caf::timespan{std::chrono::milliseconds{750}});
  auto ids = caf::get_or(cfg, "middleman.app-identifiers", std::vector<std::string>{});
  EXPECT_EQ(ids, std::vector<std::string>{"kvconnect/1"});
  EXPECT_EQ(opts.bind_address, "127.0.0.1");
}

TEST(RuntimePresetTest, SystemStartsWithNetworkLoaded) {
  caf::actor_system_config cfg;
  configure(cfg, {}, /*network=*/true);
  caf::actor_system sys{cfg};
  EXPECT_TRUE(sys.has_middleman());
  using sharing = caf::scheduler::coordinator<caf::policy::work_sharing>;
  EXPECT_NE(dynamic_cast<sharing*>(&sys.scheduler()), nullptr);
  EXPECT_EQ(sys.scheduler().num_workers(), 2u);
}

}  // namespace
}  // namespace kvc::control
