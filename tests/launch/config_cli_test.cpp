// `kvconnect config show` / `config check` as a user runs them: the built binary, its output
// and its exit codes (0 valid, 2 a config error, with one line per error on stderr).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/child_process.hpp"

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using testing::child_process;
using ::testing::HasSubstr;
using ::testing::Not;

/// Safety net for a single wait: only a broken run ever reaches it.
constexpr auto patience = 20s;

struct run_result {
  int code = -1;
  std::string out;
  std::string err;
};

run_result run(std::vector<std::string> args) {
  args.insert(args.begin(), KVC_BINARY);
  auto c = child_process::start(args);
  EXPECT_TRUE(c.ok()) << c.error().to_string();
  if (!c) return {};
  auto code = c->wait_exit(patience);
  EXPECT_TRUE(code.ok());
  return {code.ok() ? *code : -1, c->stdout_text(), c->stderr_text()};
}

/// A file in the test's working directory, named after the test.
std::string write_file(const std::string& text) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string path = std::string(info->name()) + "-" + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigCliTest, ShowWithoutAFilePrintsTheEmbeddedDefault) {
  auto r = run({"config", "show"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tensor_parallel: 2"));
  EXPECT_THAT(r.out, HasSubstr("pipeline_parallel: 1"));
  EXPECT_THAT(r.out, HasSubstr("backend: \"sim\""));
  EXPECT_THAT(r.out, HasSubstr("placement: [\"node0\", \"node0\"]"));
  EXPECT_THAT(r.out, HasSubstr("block_size: 16"));
}

TEST(ConfigCliTest, ShowAppliesSetAndItsOutputChecksClean) {
  auto r = run({"config", "show", "--set", "topology.tensor_parallel=4", "--set",
                "offload.eviction_policy=arc"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tensor_parallel: 4"));
  EXPECT_THAT(r.out, HasSubstr("eviction_policy: \"arc\""));
  const std::string path = write_file(r.out);
  auto check = run({"config", "check", path});
  EXPECT_EQ(check.code, 0) << check.err;
  EXPECT_THAT(check.out, HasSubstr(path + ": ok: 4 ranks (tp 4 x pp 1) on 1 node"));
  ::unlink(path.c_str());
}

TEST(ConfigCliTest, CheckExitsTwoWithOneLinePerError) {
  const std::string path = write_file(
      "topology:\n"
      "  tensor_paralel: 4\n"
      "offload:\n"
      "  block_size: 24\n");
  auto r = run({"config", "check", path, "--set", "runtime.port=x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("kvconnect config check: " + path +
                               ":2: topology.tensor_paralel: unknown key \"tensor_paralel\"; "
                               "did you mean \"tensor_parallel\"?\n"));
  EXPECT_THAT(r.err, HasSubstr(path + ":4: offload.block_size: 24 tokens is not a multiple of "
                                      "kv_cache.gpu_block_size 16\n"));
  EXPECT_THAT(r.err, HasSubstr("--set: runtime.port: \"x\" is not an unsigned integer\n"));
  EXPECT_THAT(r.err, HasSubstr("3 errors in the config"));
  ::unlink(path.c_str());
}

TEST(ConfigCliTest, AMissingFileIsAConfigError) {
  auto r = run({"config", "check", "no-such-file.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("no-such-file.yaml: cannot read the file"));
  auto show = run({"config", "show", "no-such-file.yaml"});
  EXPECT_EQ(show.code, 2);
}

TEST(ConfigCliTest, APathThatIsNotARegularFileIsAConfigErrorForEveryCommand) {
  // A directory opens as a stream that reads nothing: it used to load as the defaults (exit 0,
  // and `launch DIR` ran the default node).
  const std::string dir = write_file("");
  ::unlink(dir.c_str());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const std::vector<std::vector<std::string>> commands{
      {"config", "check"}, {"config", "show"}, {"launch"}, {"soak"}};
  for (auto args : commands) {
    args.push_back(dir);
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args[0] << ": " << r.err;
    EXPECT_EQ(r.out, "") << args[0] << ": started something";
    EXPECT_THAT(r.err, HasSubstr(dir + ": is a directory, not a config file\n")) << args[0];
  }
  ::rmdir(dir.c_str());
  auto device = run({"config", "check", "/dev/null"});
  EXPECT_EQ(device.code, 2);
  EXPECT_THAT(device.err, HasSubstr("/dev/null: is not a regular file, so not a config file"));
}

TEST(ConfigCliTest, AFileOverTheSizeLimitIsRefused) {
  const std::string path = write_file("# " + std::string(1 << 20, 'x') + "\n");
  auto r = run({"config", "check", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr(path + ": is 1048579 bytes: a config file is at most 1048576 "
                                      "bytes (1 MiB)"));
  ::unlink(path.c_str());
}

TEST(ConfigCliTest, ManyErrorsPrintTheFirstTwentyAndACount) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "k" + std::to_string(i) + ": 1\n";
  const std::string path = write_file(text);
  auto r = run({"config", "check", path});
  EXPECT_EQ(r.code, 2);
  const auto lines = std::count(r.err.begin(), r.err.end(), '\n');
  EXPECT_EQ(lines, 22) << r.err;
  EXPECT_THAT(r.err, HasSubstr(path + ":20: k19: unknown key"));
  EXPECT_THAT(r.err, Not(HasSubstr(path + ":21:")));
  EXPECT_THAT(r.err, HasSubstr("kvconnect config check: ... and 980 more\n"
                               "kvconnect config check: 1000 errors in the config\n"));
  ::unlink(path.c_str());
}

TEST(ConfigCliTest, ABadFaultSpecIsExitTwoBeforeAnythingStarts) {
  const std::vector<std::vector<std::string>> roles{
      {"scheduler", "--token", "t"}, {"worker", "--token", "t", "--port", "1", "--rank", "0"}};
  for (auto args : roles) {
    args.insert(args.end(), {"--fault", "drop_reprot:p=1"});
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("did you mean \"drop_report\"?")) << args[0];
    EXPECT_EQ(r.out, "") << args[0] << ": started something";
  }
  auto launch = run({"launch", "--fault", "kill_rank:rank=1"});
  EXPECT_EQ(launch.code, 2) << launch.err;
  EXPECT_THAT(launch.err, HasSubstr("runtime.faults[0]"));
  EXPECT_THAT(launch.err, HasSubstr("needs step=N"));
  // The embedded default has ranks 0 and 1 on node 0: rank 5 is not one of them.
  auto process = run({"launch", "--fault", "kill_rank:rank=5,step=3"});
  EXPECT_EQ(process.code, 2) << process.err;
  EXPECT_THAT(process.err, HasSubstr("rank 5 is not on node 0"));
  EXPECT_EQ(process.out, "") << "started something";
  auto shown = run({"config", "show", "--set", "runtime.fault_seed=5"});
  EXPECT_EQ(shown.code, 0);
  EXPECT_THAT(shown.out, HasSubstr("fault_seed: 5"));
}

TEST(ConfigCliTest, CheckNeedsAFile) {
  auto r = run({"config", "check"});
  EXPECT_NE(r.code, 0);  // a usage error
  EXPECT_THAT(r.err, HasSubstr("file is required"));
}

}  // namespace
}  // namespace kvc::launch
