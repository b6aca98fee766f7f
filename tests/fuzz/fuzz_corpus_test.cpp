// Every file of tests/fuzz/corpus/<target>/ through its fuzz target's input function, under the
// normal build: the seeds and every saved finding stay regression tests. A broken invariant
// aborts the test binary (the test fails); a target with no corpus fails too.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {
namespace {

struct target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};

class FuzzCorpus : public ::testing::TestWithParam<target> {};

TEST_P(FuzzCorpus, EveryFileRunsCleanly) {
  const std::filesystem::path dir = std::filesystem::path{KVC_FUZZ_CORPUS_DIR} / GetParam().name;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator{dir}) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in{entry.path(), std::ios::binary};
    const std::vector<char> bytes{std::istreambuf_iterator<char>{in}, {}};
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(GetParam().run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
    ++files;
  }
  EXPECT_GT(files, 0u) << "no corpus in " << dir;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus,
                         ::testing::Values(target{"wire_codec", wire_codec},
                                           target{"gate_frame", gate_frame},
                                           target{"replay_lines", replay_lines},
                                           target{"config_loader", config_loader},
                                           target{"record_reader", record_reader}),
                         [](const auto& info) { return std::string{info.param.name}; });

}  // namespace
}  // namespace kvc::fuzz
