#include "proto/frame_checksum.hpp"

#include <zlib.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

namespace kvc {
namespace {

uint32_t zlib_crc32(std::span<const char> bytes) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(bytes.data()),
                                     static_cast<uInt>(bytes.size())));
}

TEST(FrameChecksumTest, IsTheStandardCrc32) {
  // The CRC-32 check value (IEEE 802.3, reflected) and the empty input.
  EXPECT_EQ(frame_checksum(std::string_view{"123456789"}), 0xCBF43926u);
  EXPECT_EQ(frame_checksum({}), 0u);
}

/// Whichever implementation was built in (ISA-L or zlib), the value is zlib's crc32 for every
/// length and every alignment of the start: block files and frames written by one build are
/// read by another. Random bytes from fixed seeds.
TEST(FrameChecksumTest, EqualsZlibsCrc32OnRandomBytesOfAnyLengthAndAlignment) {
  for (const uint32_t seed : {1u, 7u, 2026u}) {
    std::mt19937_64 random{seed};
    std::vector<char> bytes((size_t{1} << 20) + 64);
    for (char& b : bytes) b = static_cast<char>(random());
    std::vector<size_t> lengths{0,    1,    3,     15,     16,          17,
                                63,   64,   65,    255,    256,         4095,
                                4096, 4097, 65536, 262144, 262144 + 77, size_t{1} << 20};
    for (int i = 0; i < 20; ++i) lengths.push_back(random() % (size_t{1} << 20));
    for (const size_t length : lengths) {
      for (const size_t offset : {size_t{0}, size_t{1}, size_t{7}, size_t{32}, size_t{63}}) {
        const std::span<const char> s{bytes.data() + offset, length};
        ASSERT_EQ(frame_checksum(s), zlib_crc32(s))
            << "seed " << seed << ", " << length << " bytes at offset " << offset;
      }
    }
  }
}

}  // namespace
}  // namespace kvc
