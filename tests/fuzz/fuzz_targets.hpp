#pragma once
/// The fuzz targets' input functions: each takes any bytes and must neither crash, hang, leak
/// nor allocate without bound; each checks what must hold of its code's answer and aborts when
/// it does not (libFuzzer reports that as a crash). Built twice: as libFuzzer binaries
/// (KVC_FUZZ, clang; libfuzzer_main.cpp) and as fuzz_corpus_test, which runs every file of
/// tests/fuzz/corpus/<target>/ through them under the normal build, so a finding saved there
/// is a regression test. Thread-safe: no state between calls.
#include <cstddef>
#include <cstdint>

namespace kvc::fuzz {

/// The step channel's frame decoder: kind_of, decode_hello / decode_metadata / decode_report.
int wire_codec(const uint8_t* data, size_t size);
/// The gate's pre-handshake frame (auth_reader), the bytes arriving in pieces.
int gate_frame(const uint8_t* data, size_t size);
/// The replay's line protocol (`kvconnect replay`): the bytes are the input file.
int replay_lines(const uint8_t* data, size_t size);
/// The launch config loader: YAML text, then after a NUL byte one --set item per line.
int config_loader(const uint8_t* data, size_t size);
/// The run-record reader (`kvconnect replay-run`): the bytes are a record file.
int record_reader(const uint8_t* data, size_t size);

/// Aborts with `what` on stderr: a broken invariant is a finding.
[[noreturn]] void violated(const char* what);

}  // namespace kvc::fuzz

#define KVC_FUZZ_CHECK(cond) \
  do {                       \
    if (!(cond)) ::kvc::fuzz::violated(#cond); \
  } while (0)
