#include "actors/kv_events/batch_decoder.hpp"

#include <gtest/gtest.h>

#include "actors/kv_events/batch_encoder.hpp"

namespace kvc::kv_events {
namespace {

using json = nlohmann::json;

TEST(BatchDecoderTest, ReadsOurBatchesWithVllmsFieldNames) {
  const std::vector<kv_event> evs{{kv_event_kind::stored, medium::cpu, {block_key{1, 0xab}}},
                                  {kv_event_kind::removed, medium::cpu, {block_key{2, 3}}}};
  auto j = decode_batch(encode_batch(2.5, evs, {.block_size = 32, .data_parallel_rank = 1}));
  ASSERT_TRUE(j.ok()) << j.error().to_string();
  EXPECT_EQ((*j)["ts"], 2.5);
  EXPECT_EQ((*j)["data_parallel_rank"], 1);
  const json& s = (*j)["events"][0];
  EXPECT_EQ(s["type"], "BlockStored");
  EXPECT_EQ(s["block_hashes"], json::array({"000000000000000100000000000000ab"}));
  EXPECT_TRUE(s["parent_block_hash"].is_null());
  EXPECT_EQ(s["token_ids"], json::array());
  EXPECT_EQ(s["block_size"], 32);
  EXPECT_EQ(s["medium"], "CPU");
  EXPECT_TRUE(s["group_idx"].is_null());  // omitted trailing default
  const json& r = (*j)["events"][1];
  EXPECT_EQ(r["type"], "BlockRemoved");
  EXPECT_EQ(r["medium"], "CPU");
  auto c = decode_batch(encode_cleared(1.0, {}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)["events"][0], json({{"type", "AllBlocksCleared"}}));
  EXPECT_TRUE((*c)["data_parallel_rank"].is_null());
}

TEST(BatchDecoderTest, MalformedBatchesAreErrors) {
  EXPECT_EQ(decode_batch("").error().code(), errc::invalid_argument);
  EXPECT_EQ(decode_batch("\xc1").error().code(), errc::invalid_argument);  // never used
  EXPECT_EQ(decode_batch("\x90").error().code(), errc::invalid_argument);  // []
  // [1.5, [["Nope"]]]
  const std::string unknown = std::string("\x92\xcb\x3f\xf8\0\0\0\0\0\0\x91\x91\xa4Nope", 17);
  auto e = decode_batch(unknown);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("Nope"), std::string::npos);
  // [1.5, [["AllBlocksCleared", 1]]]: more fields than the struct has
  const std::string extra =
      std::string("\x92\xcb\x3f\xf8\0\0\0\0\0\0\x91\x92\xb0", 13) + "AllBlocksCleared" + "\x01";
  EXPECT_EQ(decode_batch(extra).error().code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::kv_events
