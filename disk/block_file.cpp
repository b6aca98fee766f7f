#include "disk/block_file.hpp"

#include <algorithm>
#include <cstring>

#include "proto/frame_checksum.hpp"

namespace kvc::disk {

namespace {

constexpr std::array<char, 8> magic{'K', 'V', 'C', 'B', 'L', 'K', '\0', '\1'};
constexpr size_t checked_bytes = 64;  // the header's fields before its own checksum
constexpr std::string_view suffix = ".kvb";

void put32(char* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put64(char* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t get32(const char* at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(at[i])} << (8 * i);
  return v;
}
uint64_t get64(const char* at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<uint8_t>(at[i])} << (8 * i);
  return v;
}

uint64_t fnv1a(std::string_view s, uint64_t h) {
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

status refuse(const std::string& why) {
  return make_error(errc::layout_mismatch, "block file refused: " + why);
}

void hex64(std::string& out, uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  for (int shift = 60; shift >= 0; shift -= 4) out.push_back(digits[(v >> shift) & 0xf]);
}

}  // namespace

std::string run_digest::hex() const {
  std::string out;
  for (uint8_t b : bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    out.push_back(digits[b >> 4]);
    out.push_back(digits[b & 0xf]);
  }
  return out;
}

run_digest digest_of(std::string_view description) {
  const uint64_t a = fnv1a(description, 0xcbf29ce484222325ULL);
  const uint64_t b = fnv1a(description, block_key::mix(0xcbf29ce484222325ULL ^ description.size()));
  run_digest d;
  for (int i = 0; i < 8; ++i) {
    d.bytes[i] = static_cast<uint8_t>(a >> (8 * i));
    d.bytes[8 + i] = static_cast<uint8_t>(b >> (8 * i));
  }
  return d;
}

void encode_header(const block_file_id& id, uint32_t payload_crc, std::span<char> header) {
  std::fill(header.begin(), header.end(), '\0');
  char* h = header.data();
  std::memcpy(h, magic.data(), magic.size());
  put32(h + 8, format_version);
  put32(h + 12, static_cast<uint32_t>(header_bytes));
  put64(h + 16, id.key.hi);
  put64(h + 24, id.key.lo);
  put64(h + 32, id.payload_bytes);
  std::memcpy(h + 40, id.run.bytes.data(), id.run.bytes.size());
  put32(h + 56, id.rank);
  put32(h + 60, payload_crc);
  put32(h + checked_bytes, frame_checksum({h, checked_bytes}));
}

result<uint32_t> check_header(const block_file_id& id, std::span<const char> header) {
  if (header.size() < checked_bytes + checksum_bytes) return refuse("a header cut short");
  const char* h = header.data();
  if (std::memcmp(h, magic.data(), magic.size()) != 0) return refuse("not a block file (magic)");
  if (get32(h + checked_bytes) != frame_checksum({h, checked_bytes})) {
    return refuse("the header's checksum does not match");
  }
  if (get32(h + 8) != format_version) {
    return refuse("format version " + std::to_string(get32(h + 8)) + ", expected " +
                  std::to_string(format_version));
  }
  if (get32(h + 12) != header_bytes) return refuse("a header of another size");
  if (get64(h + 16) != id.key.hi || get64(h + 24) != id.key.lo) {
    return refuse("the file holds another block's key");
  }
  if (get64(h + 32) != id.payload_bytes) {
    return refuse("a block of " + std::to_string(get64(h + 32)) + " bytes, expected " +
                  std::to_string(id.payload_bytes));
  }
  if (std::memcmp(h + 40, id.run.bytes.data(), id.run.bytes.size()) != 0) {
    return refuse("written by another run (run digest)");
  }
  if (get32(h + 56) != id.rank) {
    return refuse("written by rank " + std::to_string(get32(h + 56)) + ", expected rank " +
                  std::to_string(id.rank));
  }
  return get32(h + 60);
}

std::string file_name(const block_key& key) {
  std::string out;
  out.reserve(32 + suffix.size());
  hex64(out, key.hi);
  hex64(out, key.lo);
  out.append(suffix);
  return out;
}

result<block_key> key_of_file_name(std::string_view name) {
  const auto not_one = [&] {
    return make_error(errc::invalid_argument, "not a block file name: " + std::string{name});
  };
  if (name.size() != 32 + suffix.size() || !name.ends_with(suffix)) return not_one();
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = name[i];
    uint64_t v = 0;
    if (c >= '0' && c <= '9') {
      v = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return not_one();
    }
    parts[i / 16] = (parts[i / 16] << 4) | v;
  }
  return block_key{parts[0], parts[1]};
}

}  // namespace kvc::disk
