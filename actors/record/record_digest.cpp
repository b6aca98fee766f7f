// Digests of what the cores answered (run_record.hpp): FNV-1a 64 over each field's values,
// little-endian, strings with their length first, so that a digest depends on every value
// and on where one value ends and the next begins.
#include "actors/record/run_record.hpp"

#include <bit>
#include <string_view>

namespace kvc::record {

namespace {

class hasher {
 public:
  void u64(uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void str(std::string_view s) noexcept {
    u64(s.size());
    for (char c : s) byte(static_cast<uint8_t>(c));
  }
  template <class Range>
  void uints(const Range& r) noexcept {
    u64(std::size(r));
    for (auto v : r) u64(v);
  }
  uint64_t value() const noexcept { return h_; }

 private:
  void byte(uint8_t b) noexcept {
    h_ ^= b;
    h_ *= 0x100000001b3ULL;
  }
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

uint64_t jobs_digest(const std::vector<transfer_job>& jobs) {
  hasher h;
  h.u64(jobs.size());
  for (const transfer_job& j : jobs) {
    h.u64(j.id);
    h.str(j.request_id);
    h.u64(static_cast<uint64_t>(j.kind));
    h.uints(j.slots);
    h.uints(j.gpu_blocks);
    h.u64(j.skip);
    h.uints(j.group_sizes);
    h.uints(j.block_indices);
  }
  return h.value();
}

uint64_t strings_digest(const std::vector<std::string>& v) {
  hasher h;
  h.u64(v.size());
  for (const auto& s : v) h.str(s);
  return h.value();
}

template <size_t N>
uint64_t combine(const std::array<uint64_t, N>& fields) {
  hasher h;
  for (uint64_t f : fields) h.u64(f);
  return h.value();
}

}  // namespace

uint64_t metadata_digest::combined() const noexcept { return combine(fields); }
uint64_t output_digest::combined() const noexcept { return combine(fields); }

metadata_digest digest_of(const connector_metadata& m) {
  metadata_digest d;
  hasher step;
  step.u64(m.step);
  hasher flush;
  flush.uints(m.flush);
  hasher failed;
  failed.uints(m.failed);
  d.fields = {step.value(),
              jobs_digest(m.loads),
              jobs_digest(m.stores),
              flush.value(),
              failed.value(),
              strings_digest(m.flush_requests),
              strings_digest(m.finished_requests)};
  return d;
}

output_digest digest_of(const connector_output& o) {
  hasher step;
  step.u64(o.step);
  hasher jobs;
  jobs.u64(o.jobs.size());
  for (const job_result& j : o.jobs) {
    jobs.u64(j.job);
    jobs.u64(static_cast<uint64_t>(j.kind));
    jobs.u64(j.ok ? 1 : 0);
    jobs.u64(static_cast<uint64_t>(j.error));
    jobs.u64(j.bytes);
    jobs.u64(std::bit_cast<uint64_t>(j.seconds));
    jobs.str(j.detail);
  }
  return {{step.value(), jobs.value()}};
}

}  // namespace kvc::record
