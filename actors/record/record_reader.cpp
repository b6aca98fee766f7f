#include "actors/record/record_reader.hpp"

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
  std::vector<char> payload;
  event_decoder decoder;
  while (offset < size) {
    if (size - offset < 4) {
      return at(make_error(errc::invalid_argument, "record: a truncated length prefix"), frame,
                offset);
    }
    unsigned char len_bytes[4];
    if (!in.read(reinterpret_cast<char*>(len_bytes), 4)) {
      return at(make_error(errc::io_error, "record: read failed"), frame, offset);
    }
    const uint64_t len = uint64_t{len_bytes[0]} | uint64_t{len_bytes[1]} << 8 |
                         uint64_t{len_bytes[2]} << 16 | uint64_t{len_bytes[3]} << 24;
    if (len > max_record_frame) {
      return at(make_error(errc::invalid_argument,
                           "record: a frame of " + std::to_string(len) +
                               " bytes is over the limit of " + std::to_string(max_record_frame)),
                frame, offset);
    }
    if (len > size - offset - 4) {
      return at(make_error(errc::invalid_argument,
                           "record: a frame of " + std::to_string(len) +
                               " bytes runs past the end of the record"),
                frame, offset);
    }
    payload.resize(len);
    if (!in.read(payload.data(), static_cast<std::streamsize>(len))) {
      return at(make_error(errc::io_error, "record: read failed"), frame, offset);
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
    offset += 4 + len;
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
