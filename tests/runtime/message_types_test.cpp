// Proves that every kvconnect message crosses a process boundary intact: each type goes
// through CAF's binary serializer and back, alone and inside a caf::message (which is what the
// middleman sends: type *names* plus payload, rebuilt from the names on the receiving side).
#include "actors/runtime/system_config.hpp"

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

#include "actors/runtime/atoms.hpp"
#include "actors/runtime/error_bridge.hpp"
#include "actors/runtime/interfaces.hpp"
#include "tests/runtime/deterministic_fixture.hpp"

namespace kvc::runtime {
namespace {

transfer_job sample_job(job_id id, transfer_kind kind) {
  return {.id = id,
          .request_id = "req-" + std::to_string(id) + "-\xc3\xa9",  // any bytes survive
          .kind = kind,
          .slots = {7, 8, 4'000'000'000u},
          .gpu_blocks = {1, 2, 3, 4, 5},
          .skip = 1};
}

connector_metadata sample_metadata() {
  return {.step = 42,
          .loads = {sample_job(1, transfer_kind::load)},
          .stores = {sample_job(2, transfer_kind::store), sample_job(3, transfer_kind::store)},
          .flush = {1, std::numeric_limits<job_id>::max()}};
}

completion_event sample_event() {
  return {.rank = 3,
          .incarnation = 2,
          .seq = 99,
          .step = 41,
          .job = 1ull << 40,
          .kind = transfer_kind::store,
          .ok = false,
          .error = errc::injected_fault,
          .bytes = 123'456'789'012ull,
          .seconds = 0.1 + 0.2};  // not exactly representable: must survive bit-exactly
}

job_result sample_result() {
  return {.job = 5,
          .kind = transfer_kind::load,
          .ok = true,
          .error = errc::ok,
          .bytes = 4096,
          .seconds = 1e-9};
}

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

TEST_F(MessageTypesTest, ProtoStructsRoundTrip) {
  EXPECT_EQ(round_trip(sample_job(9, transfer_kind::store)), sample_job(9, transfer_kind::store));
  EXPECT_EQ(round_trip(sample_metadata()), sample_metadata());
  EXPECT_EQ(round_trip(connector_metadata{}), connector_metadata{});
  completion_event ev = round_trip(sample_event());
  EXPECT_EQ(ev, sample_event());
  EXPECT_EQ(ev.seconds, 0.1 + 0.2);  // bit-exact double
  EXPECT_EQ(ev.kind, transfer_kind::store);
  EXPECT_EQ(ev.error, errc::injected_fault);
  EXPECT_EQ(round_trip(sample_result()), sample_result());
  connector_output out{.step = 7, .jobs = {sample_result(), sample_result()}};
  EXPECT_EQ(round_trip(out), out);
}

// CAF 0.17's own double packing loops forever on infinity and loses -0.0, NaN and subnormals:
// proto/ sends doubles as bit patterns (kvc::exact_double). Printing still shows the value.
TEST_F(MessageTypesTest, SpecialDoublesRoundTrip) {
  job_result r = sample_result();
  for (double d : {0.0, -0.0, std::numeric_limits<double>::denorm_min(),
                   std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity()}) {
    r.seconds = d;
    job_result back = round_trip(r);
    EXPECT_EQ(back.seconds, d);
    EXPECT_EQ(std::signbit(back.seconds), std::signbit(d));
  }
  r.seconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(round_trip(r).seconds));
  r.seconds = 0.25;
  std::string text = caf::deep_to_string(r);
  EXPECT_NE(text.find("0.25"), std::string::npos) << text;
}

TEST_F(MessageTypesTest, EveryInterfaceMessageRoundTripsAsACafMessage) {
  auto check = [&](const caf::message& msg) {
    caf::message back = round_trip(msg);
    EXPECT_EQ(to_string(back), to_string(msg));
    return back;
  };
  // coordinator_actor
  std::vector<completion_event> events{sample_event(), completion_event{}};
  auto report =
      check(caf::make_message(report_atom::value, rank_id{3}, uint32_t{2}, step_id{41}, events));
  ASSERT_TRUE((report.match_elements<report_atom, rank_id, uint32_t, step_id,
                                     std::vector<completion_event>>()));
  EXPECT_EQ(report.get_as<std::vector<completion_event>>(4), events);
  auto expect = check(caf::make_message(expect_atom::value, step_id{5},
                                        std::vector<job_id>{1, 2, 3}, std::vector<job_id>{}));
  ASSERT_TRUE(
      (expect.match_elements<expect_atom, step_id, std::vector<job_id>, std::vector<job_id>>()));
  EXPECT_EQ(expect.get_as<std::vector<job_id>>(2), (std::vector<job_id>{1, 2, 3}));
  check(caf::make_message(rank_up_atom::value, rank_id{1}, uint32_t{7}));
  check(caf::make_message(rank_down_atom::value, rank_id{1}));
  // worker_actor and output_sink_actor
  auto meta = check(caf::make_message(sample_metadata()));
  ASSERT_TRUE(meta.match_elements<connector_metadata>());
  EXPECT_EQ(meta.get_as<connector_metadata>(0), sample_metadata());
  connector_output out{.step = 7, .jobs = {sample_result()}};
  auto output = check(caf::make_message(out));
  ASSERT_TRUE(output.match_elements<connector_output>());
  EXPECT_EQ(output.get_as<connector_output>(0), out);
  // Single elements of other types used in messages.
  check(caf::make_message(sample_job(1, transfer_kind::load)));
  check(caf::make_message(sample_result()));
  check(caf::make_message(std::vector<job_result>{sample_result()}));
}

worker_actor::behavior_type idle_worker(worker_actor::pointer) {
  return {[](const connector_metadata&) {}};
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
  check(sys().message_types<coordinator_actor>(), "std::vector<kvc::completion_event>");
  check(sys().message_types<coordinator_actor>(), "std::vector<uint64_t>");
  check(sys().message_types<worker_actor>(), "kvc::connector_metadata");
  check(sys().message_types<output_sink_actor>(), "kvc::connector_output");
  check(sys().message_types<scheduler_actor>(), "kvc::worker_actor");
  check(sys().message_types<scheduler_actor>(), "kvc::coordinator_actor");
  check(sys().message_types<scheduler_service_actor>(), "kvc::output_sink_actor");
  EXPECT_EQ(sys().message_types<scheduler_service_actor>().size(),
            sys().message_types<scheduler_actor>().size() + 3);
  EXPECT_EQ(sys().message_types<coordinator_actor>().size(), 4u);
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
  runtime_options opts;
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
}  // namespace kvc::runtime
