#pragma once
/// record_reader: reads a run record (record_codec.hpp) back: the magic, the header (schema and
/// config digest checked before any event is read) and every event. Reads are bounded: a length
/// prefix over max_record_frame or past the end of the input is refused before anything is
/// allocated for it. Every problem is one error naming the frame and its byte offset:
/// errc::protocol_mismatch for another schema or a config digest that does not match,
/// errc::invalid_argument for bad bytes, errc::io_error when the file cannot be read.
/// Pure functions (the file one reads the file); thread-safe.
#include <istream>
#include <span>
#include <string>

#include "actors/record/run_record.hpp"
#include "proto/status.hpp"

namespace kvc::record {

/// A record from `size` bytes of `in`.
result<run_record> read_record(std::istream& in, uint64_t size);
/// A record held in memory (fuzzing, tests).
result<run_record> read_record(std::span<const char> bytes);
/// A record file.
result<run_record> read_record_file(const std::string& path);

}  // namespace kvc::record
