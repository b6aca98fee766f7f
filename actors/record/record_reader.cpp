#include "actors/record/record_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "actors/record/record_codec.hpp"

namespace kvc::record {

namespace {

status at(const status& st, uint64_t frame, uint64_t offset) {
  return make_error(st.code(), "frame " + std::to_string(frame) + " (byte " +
                                   std::to_string(offset) + "): " + st.message());
}

uint32_t from_le32(const char* p) noexcept {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

std::string hex32(uint32_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = digits[v & 0xf];
  return out;
}

}  // namespace

result<run_record> read_record(std::istream& in, uint64_t size) {
  std::string magic(record_magic.size(), '\0');
  if (size < magic.size() || !in.read(magic.data(), static_cast<std::streamsize>(magic.size())) ||
      magic != record_magic) {
    return make_error(errc::invalid_argument, "record: not a kvconnect run record (bad magic)");
  }
  uint64_t offset = magic.size();
  uint64_t frame = 0;
  run_record rec;
  std::vector<char> buf;  // the frame's length prefix, payload and checksum
  event_decoder decoder;
  auto bad = [&](std::string why) {
    return at(make_error(errc::invalid_argument, "record: " + std::move(why)), frame, offset);
  };
  while (offset < size) {
    if (size - offset < 4) return bad("a truncated length prefix");
    buf.resize(4);
    if (!in.read(buf.data(), 4)) {
      return at(make_error(errc::io_error, "record: read failed"), frame, offset);
    }
    const uint64_t len = from_le32(buf.data());
    if (len > max_record_frame) {
      return bad("a frame of " + std::to_string(len) + " bytes is over the limit of " +
                 std::to_string(max_record_frame));
    }
    if (len > size - offset - 4) {
      return bad("a frame of " + std::to_string(len) + " bytes runs past the end of the record");
    }
    const uint64_t with_sum = std::min<uint64_t>(len + checksum_bytes, size - offset - 4);
    buf.resize(4 + with_sum);
    if (!in.read(buf.data() + 4, static_cast<std::streamsize>(with_sum))) {
      return at(make_error(errc::io_error, "record: read failed"), frame, offset);
    }
    const std::span<const char> payload{buf.data() + 4, len};
    if (frame == 0) {
      // Another version first: an older record has no checksums to check.
      if (auto v = header_schema(payload)) {
        if (auto st = check_schema(*v); !st) return at(st, frame, offset);
      }
    }
    if (with_sum < len + checksum_bytes) return bad("the frame's checksum is cut short");
    const uint32_t stored = from_le32(buf.data() + 4 + len);
    const uint32_t computed = frame_checksum({buf.data(), 4 + len});
    if (stored != computed) {
      return bad("the frame (" + std::to_string(len) + " bytes) fails its checksum (stored " +
                 hex32(stored) + ", computed " + hex32(computed) + "): the record is corrupt");
    }
    if (frame == 0) {
      auto h = decode_header(payload);
      if (!h) return at(h.error(), frame, offset);
      rec.header = std::move(h).value();
    } else {
      auto e = decoder.decode(payload);
      if (!e) return at(e.error(), frame, offset);
      rec.events.push_back(std::move(e).value());
    }
    offset += record_frame_overhead + len;
    ++frame;
  }
  if (frame == 0) return make_error(errc::invalid_argument, "record: no header");
  return rec;
}

result<run_record> read_record(std::span<const char> bytes) {
  std::istringstream in(std::string{bytes.data(), bytes.size()});
  return read_record(in, bytes.size());
}

result<run_record> read_record_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    return make_error(errc::io_error, "record: cannot open " + path + ": " + std::strerror(errno));
  }
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  auto r = read_record(in, size);
  if (!r) return make_error(r.error().code(), path + ": " + r.error().message());
  return r;
}

}  // namespace kvc::record
