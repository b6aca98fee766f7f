#include "actors/kv_events/batch_encoder.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvc::kv_events {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string out;
  for (int x : b) out.push_back(static_cast<char>(x));
  return out;
}

std::string str(std::string_view s) {  // fixstr
  return bytes({0xa0 | static_cast<int>(s.size())}) + std::string{s};
}

const std::string ts_1_5 = bytes({0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0});  // float64 1.5
const std::string hash_1_2 =
    bytes({0xc4, 16, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2});  // bin8, 16 bytes

TEST(BatchEncoderTest, StoredAndRemovedAsVllmLaysThemOut) {
  const std::vector<kv_event> evs{
      {kv_event_kind::stored, medium::cpu, {block_key{1, 2}}},
      {kv_event_kind::removed, medium::cpu, {block_key{1, 2}, block_key{0xff00000000000000, 7}}}};
  const std::string expected =
      bytes({0x92}) + ts_1_5 + bytes({0x92}) +
      // ["BlockStored", [h], nil, [], 16, nil, "CPU", nil]
      bytes({0x98}) + str("BlockStored") + bytes({0x91}) + hash_1_2 +
      bytes({0xc0, 0x90, 0x10, 0xc0}) + str("CPU") + bytes({0xc0}) +
      // ["BlockRemoved", [h, h2], "CPU"]
      bytes({0x93}) + str("BlockRemoved") + bytes({0x92}) + hash_1_2 +
      bytes({0xc4, 16, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}) + str("CPU");
  EXPECT_EQ(encode_batch(1.5, evs, {.block_size = 16, .data_parallel_rank = std::nullopt}),
            expected);
}

TEST(BatchEncoderTest, TheFileTiersMediumIsVllmMainsStorage) {
  // vLLM main's fs tier publishes MEDIUM_STORAGE ("STORAGE", vllm/distributed/kv_events.py).
  const std::vector<kv_event> evs{{kv_event_kind::removed, medium::fs, {block_key{1, 2}}}};
  const std::string expected = bytes({0x92}) + ts_1_5 + bytes({0x91}) +
                               // ["BlockRemoved", [h], "STORAGE"]
                               bytes({0x93}) + str("BlockRemoved") + bytes({0x91}) + hash_1_2 +
                               str("STORAGE");
  EXPECT_EQ(encode_batch(1.5, evs, {.block_size = 16, .data_parallel_rank = std::nullopt}),
            expected);
}

TEST(BatchEncoderTest, DataParallelRankIsTheThirdFieldWhenSet) {
  const std::string expected = bytes({0x93}) + ts_1_5 + bytes({0x90, 0x05});
  EXPECT_EQ(encode_batch(1.5, {}, {.block_size = 16, .data_parallel_rank = 5}), expected);
  EXPECT_EQ(encode_batch(1.5, {}, {.block_size = 16, .data_parallel_rank = std::nullopt}),
            bytes({0x92}) + ts_1_5 + bytes({0x90}));
}

TEST(BatchEncoderTest, LargeBlockSizeUsesTheCompactUintForm) {
  const std::vector<kv_event> evs{{kv_event_kind::stored, medium::cpu, {}}};
  const std::string out =
      encode_batch(1.5, evs, {.block_size = 256, .data_parallel_rank = std::nullopt});
  // ... [], 0xcd 0x01 0x00 (uint16 256), nil ...
  EXPECT_NE(out.find(bytes({0x90, 0xcd, 0x01, 0x00, 0xc0})), std::string::npos);
}

TEST(BatchEncoderTest, AllBlocksCleared) {
  const std::string expected =
      bytes({0x92}) + ts_1_5 + bytes({0x91, 0x91, 0xb0}) + "AllBlocksCleared";
  EXPECT_EQ(encode_cleared(1.5, {.block_size = 16, .data_parallel_rank = std::nullopt}), expected);
}

TEST(BatchEncoderTest, SequenceNumbersAreBigEndian) {
  EXPECT_EQ(sequence_bytes(0), std::string(8, '\0'));
  EXPECT_EQ(sequence_bytes(0x0102030405060708ULL), bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(end_of_replay(), std::string(8, '\xff'));
  EXPECT_EQ(hash_bytes({0x0102030405060708ULL, 0x090a0b0c0d0e0f10ULL}),
            bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
}

}  // namespace
}  // namespace kvc::kv_events
