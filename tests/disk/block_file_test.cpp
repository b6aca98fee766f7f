#include "disk/block_file.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvc::disk {
namespace {

block_file_id sample() {
  return {.key = block_key{0x0123456789abcdefULL, 42},
          .payload_bytes = 5000,
          .run = digest_of("model=m;block=16"),
          .rank = 3};
}

std::vector<char> header_of(const block_file_id& id, uint32_t crc = 0xdeadbeef) {
  std::vector<char> h(header_bytes);
  encode_header(id, crc, h);
  return h;
}

TEST(BlockFileTest, HeaderRoundTripGivesThePayloadChecksum) {
  const auto h = header_of(sample());
  const auto crc = check_header(sample(), h);
  ASSERT_TRUE(crc.ok()) << crc.error().to_string();
  EXPECT_EQ(*crc, 0xdeadbeefu);
}

TEST(BlockFileTest, HeaderOfAnotherKeySizeRunOrRankIsRefused) {
  const auto h = header_of(sample());
  auto other = sample();
  other.key.lo = 43;
  EXPECT_EQ(check_header(other, h).code(), errc::layout_mismatch);
  other = sample();
  other.payload_bytes = 4096;
  EXPECT_EQ(check_header(other, h).code(), errc::layout_mismatch);
  other = sample();
  other.run = digest_of("model=m;block=32");
  EXPECT_EQ(check_header(other, h).code(), errc::layout_mismatch);
  EXPECT_NE(check_header(other, h).error().message().find("another run"), std::string::npos);
  other = sample();
  other.rank = 0;
  EXPECT_EQ(check_header(other, h).code(), errc::layout_mismatch);
}

TEST(BlockFileTest, EveryFlippedHeaderByteIsRefused) {
  const auto good = header_of(sample());
  for (size_t i = 0; i < 68; ++i) {
    auto h = good;
    h[i] = static_cast<char>(h[i] ^ 0x10);
    EXPECT_FALSE(check_header(sample(), h).ok()) << "byte " << i;
  }
}

TEST(BlockFileTest, AShortOrZeroHeaderIsRefused) {
  const auto h = header_of(sample());
  EXPECT_FALSE(check_header(sample(), std::span{h}.first(60)).ok());
  const std::vector<char> zeros(header_bytes, '\0');
  EXPECT_FALSE(check_header(sample(), zeros).ok());
}

TEST(BlockFileTest, FileBytesArePagesForHeaderAndPaddedPayload) {
  EXPECT_EQ(file_bytes(1), 2 * page_bytes);
  EXPECT_EQ(file_bytes(4096), 2 * page_bytes);
  EXPECT_EQ(file_bytes(4097), 3 * page_bytes);
}

TEST(BlockFileTest, FileNameRoundTripsAndRefusesOthers) {
  const block_key k{0xfedcba9876543210ULL, 0x1ULL};
  EXPECT_EQ(file_name(k), "fedcba98765432100000000000000001.kvb");
  const auto back = key_of_file_name(file_name(k));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, k);
  EXPECT_FALSE(key_of_file_name("config.txt").ok());
  EXPECT_FALSE(key_of_file_name("FEDCBA98765432100000000000000001.kvb").ok());
  EXPECT_FALSE(key_of_file_name("fedcba98765432100000000000000001.kvb.tmp.1.2").ok());
}

TEST(BlockFileTest, DigestDependsOnEveryByteOfTheDescription) {
  EXPECT_EQ(digest_of("a=1"), digest_of("a=1"));
  EXPECT_NE(digest_of("a=1"), digest_of("a=2"));
  EXPECT_NE(digest_of(""), digest_of(std::string(1, '\0')));
  EXPECT_EQ(digest_of("a=1").hex().size(), 32u);
}

}  // namespace
}  // namespace kvc::disk
