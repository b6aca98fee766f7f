// The step channel's recording decorators over the memory transport: every frame sent and
// received is recorded once, on the right track, with its kind, step, rank and bytes, and the
// two ends of each message carry the same message id; the frames themselves pass unchanged.
#include "actors/trace/traced_transport.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <memory>
#include <mutex>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "actors/channel/memory_transport.hpp"
#include "actors/channel/rank_channel.hpp"
#include "actors/channel/scheduler_channel.hpp"

namespace kvc::trace {
namespace {

using namespace std::chrono_literals;

/// A sink that keeps every record (the test's fake).
class recording_sink final : public trace_sink {
 public:
  void write(const trace_record& r) override {
    std::lock_guard lock{mu_};
    records_.push_back(r);
  }
  std::vector<trace_record> records() {
    std::lock_guard lock{mu_};
    return records_;
  }

 private:
  std::mutex mu_;
  std::vector<trace_record> records_;
};

const trace_record* find(const std::vector<trace_record>& rs, direction d, std::string_view type,
                         std::string_view track) {
  for (const auto& r : rs) {
    if (r.dir == d && r.type == type && r.track == track) return &r;
  }
  return nullptr;
}

TEST(TracedTransport, RecordsBothEndsOfEveryFrameWithOneMessageId) {
  auto sched_sink = std::make_shared<recording_sink>();
  auto rank_sink = std::make_shared<recording_sink>();
  auto sched_tracer = std::make_shared<tracer>(trace_level::messages, sched_sink, "scheduler", 0);
  auto rank_tracer = std::make_shared<tracer>(trace_level::messages, rank_sink, "worker", 0);

  auto server = std::make_unique<traced_server_transport>(
      std::make_unique<channel::memory_server>(), sched_tracer);
  traced_server_transport& traced = *server;
  auto ch = channel::scheduler_channel::create(std::move(server), 2, "tok");
  ASSERT_TRUE(ch);
  const std::string peer = channel::peer_id(1, 3);
  auto conn = traced.connect_local(peer);
  ASSERT_TRUE(conn);
  auto rank_conn = std::make_unique<traced_client_transport>(std::move(conn).value(), rank_tracer,
                                                             peer, rank_track(1));
  auto rc = channel::rank_channel::open(std::move(rank_conn), {1, 3, "tok"});
  ASSERT_TRUE(rc);
  (*ch)->rank_up(1, 3);
  std::vector<step_report> reports;
  (*ch)->receive(0ms, reports);  // the hello

  connector_metadata meta;
  meta.step = 7;
  meta.finished_requests = {"req-a"};
  (*ch)->send_step(meta);
  auto got = (*rc)->next_step(0ms);
  ASSERT_TRUE(got);
  ASSERT_TRUE(*got);
  EXPECT_EQ(**got, meta);  // the decorator passes frames unchanged
  step_report rep;
  rep.rank = 1;
  rep.incarnation = 3;
  rep.step = 7;
  ASSERT_TRUE((*rc)->send_report(rep));
  (*ch)->receive(0ms, reports);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0], rep);

  const auto s = sched_sink->records();
  const auto r = rank_sink->records();
  ASSERT_EQ(s.size(), 3u);  // hello in, metadata out, report in
  ASSERT_EQ(r.size(), 3u);  // hello out, metadata in, report out
  struct pair_case {
    std::string_view type;
    direction from_rank;
    int64_t step;
  };
  for (const pair_case& c :
       {pair_case{"hello", direction::send, -1}, pair_case{"metadata", direction::receive, 7},
        pair_case{"report", direction::send, 7}}) {
    const direction other = c.from_rank == direction::send ? direction::receive : direction::send;
    const trace_record* at_rank = find(r, c.from_rank, c.type, "rank 1");
    const trace_record* at_sched = find(s, other, c.type, "scheduler");
    ASSERT_NE(at_rank, nullptr) << c.type;
    ASSERT_NE(at_sched, nullptr) << c.type;
    EXPECT_FALSE(message_id_of(*at_rank).empty());
    EXPECT_EQ(message_id_of(*at_rank), message_id_of(*at_sched)) << c.type;
    EXPECT_EQ(at_rank->step, c.step);
    EXPECT_EQ(at_sched->step, c.step);
    EXPECT_EQ(at_rank->rank, 1);
    EXPECT_EQ(at_sched->rank, 1);
    EXPECT_EQ(at_rank->bytes, at_sched->bytes);
    EXPECT_GT(at_rank->bytes, 0u);
    EXPECT_EQ(at_rank->role, "worker");
    EXPECT_EQ(at_sched->role, "scheduler");
    EXPECT_GT(at_rank->mono_ns, 0);
    EXPECT_GT(at_rank->wall_ns, 0);
  }
  EXPECT_EQ(find(s, direction::send, "metadata", "scheduler")->bytes, channel::encode(meta).size());
  // Different messages never share an id.
  EXPECT_NE(message_id_of(*find(s, direction::send, "metadata", "scheduler")),
            message_id_of(*find(s, direction::receive, "report", "scheduler")));
  // The id is the one the line carries, built when it is written.
  EXPECT_THAT(to_json_line(*find(s, direction::send, "metadata", "scheduler")),
              testing::HasSubstr("\"msg\":\"metadata/7/r1.3\""));
}

TEST(TracedTransport, AFailedSendIsRecordedWithItsError) {
  auto sink = std::make_shared<recording_sink>();
  auto t = std::make_shared<tracer>(trace_level::messages, sink, "scheduler", 0);
  traced_server_transport server{std::make_unique<channel::memory_server>(), t};
  connector_metadata meta;
  meta.step = 2;
  const auto bytes = channel::encode(meta);
  EXPECT_FALSE(server.send("r0.0", bytes));  // nobody connected as r0.0
  const auto rs = sink->records();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].type, "metadata");
  EXPECT_EQ(rs[0].step, 2);
  EXPECT_FALSE(rs[0].note.empty());
}

TEST(TracedTransport, AFrameItCannotReadIsPassedOnAndRecordedAsMalformed) {
  auto sink = std::make_shared<recording_sink>();
  auto t = std::make_shared<tracer>(trace_level::messages, sink, "scheduler", 0);
  auto inner = std::make_unique<channel::memory_server>();
  auto client = inner->connect_local("r0.0");
  ASSERT_TRUE(client);
  traced_server_transport server{std::move(inner), t};
  const std::vector<char> junk{char{9}, char{1}};
  ASSERT_TRUE((*client)->send(junk));
  auto f = server.receive(0ms);
  ASSERT_TRUE(f);
  ASSERT_TRUE(*f);
  EXPECT_EQ((*f)->bytes, junk);
  const auto rs = sink->records();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].type, "malformed");
  EXPECT_TRUE(message_id_of(rs[0]).empty());
}

TEST(TraceRecord, JsonLineEscapesTextAndLeavesOutUnsetFields) {
  trace_record r;
  r.wall_ns = 5;
  r.mono_ns = 6;
  r.pid = 42;
  r.role = "worker";
  r.track = "rank 0";
  r.dir = direction::send;
  r.type = "report";
  r.note = "a \"quoted\"\nline";
  EXPECT_EQ(to_json_line(r),
            "{\"wall_ns\":5,\"mono_ns\":6,\"node\":0,\"pid\":42,\"role\":\"worker\","
            "\"track\":\"rank 0\",\"dir\":\"send\",\"type\":\"report\",\"bytes\":0,"
            "\"note\":\"a \\\"quoted\\\"\\nline\"}");
}

TEST(TraceRecord, LevelsParseAndRefuseUnknownNames) {
  EXPECT_EQ(*parse_trace_level("off"), trace_level::off);
  EXPECT_EQ(*parse_trace_level("messages"), trace_level::messages);
  EXPECT_EQ(*parse_trace_level("jobs"), trace_level::jobs);
  auto bad = parse_trace_level("all");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), errc::invalid_argument);
}


TEST(Tracer, TheFileHoldsEveryRecordInOrderWithItsMessageIdOnceTheTracerIsGone) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvc-tracer-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  constexpr int records = 600;  // two full batches and a part of a third
  {
    auto t = tracer::open(trace_level::messages, dir.string(), "worker", "r2.5", 0);
    ASSERT_TRUE(t) << t.error().to_string();
    path = (*t)->path();
    for (int i = 0; i < records; ++i) {
      trace_record r;
      r.dir = direction::send;
      r.type = "report";
      r.step = i;
      r.rank = 2;
      r.incarnation = 5;
      (*t)->emit(std::move(r));
    }
  }
  std::ifstream in{path};
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    EXPECT_THAT(line, testing::HasSubstr("\"step\":" + std::to_string(n) + ","));
    EXPECT_THAT(line, testing::HasSubstr("\"msg\":\"report/" + std::to_string(n) + "/r2.5\""));
    EXPECT_THAT(line, testing::HasSubstr("\"role\":\"worker\""));
    ++n;
  }
  EXPECT_EQ(n, records);
  std::filesystem::remove_all(dir);
}

// Trace files hold request ids and block hashes: the file is 0600 and the directories open()
// makes are 0700 (the umask set to the common 022, so that the modes are what open() asked for).
TEST(Tracer, TheFileIsPrivateAndSoAreTheDirectoriesItMakes) {
  const mode_t old_umask = ::umask(022);
  const std::filesystem::path top =
      std::filesystem::temp_directory_path() / ("kvc-tracer-private-" + std::to_string(::getpid()));
  std::filesystem::remove_all(top);
  const std::filesystem::path dir = top / "traces";
  std::string path;
  {
    auto t = tracer::open(trace_level::messages, dir.string(), "scheduler", "node0", 0);
    ASSERT_TRUE(t) << t.error().to_string();
    path = (*t)->path();
    (*t)->emit(trace_record{});
  }
  auto mode = [](const std::filesystem::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(top), 0700u);
  EXPECT_EQ(mode(dir), 0700u);
  EXPECT_EQ(mode(path), 0600u);
  EXPECT_GT(std::filesystem::file_size(path), 0u);
  std::filesystem::remove_all(top);
  ::umask(old_umask);
}

TEST(Tracer, OpenRefusesLevelOffAndAnEmptyDirectory) {
  EXPECT_EQ(tracer::open(trace_level::off, "/tmp", "worker", "", 0).error().code(),
            errc::invalid_argument);
  EXPECT_EQ(tracer::open(trace_level::messages, "", "worker", "", 0).error().code(),
            errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::trace
