#include "proto/completion.hpp"

namespace kvc {

std::string clip_detail(std::string_view text) {
  if (text.size() <= max_detail_bytes) return std::string{text};
  size_t n = max_detail_bytes;
  // Back off continuation bytes (10xxxxxx), then the lead byte whose sequence they belong to.
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return std::string{text.substr(0, n)};
}

template <class Scope>
std::string outcome_text(const basic_job_result<Scope>& r) {
  if (r.ok) return "ok";
  std::string out{to_string(r.error)};
  if (!r.detail.empty()) out += ": " + r.detail;
  return out;
}

template <class Scope>
std::string failure_line(const basic_job_result<Scope>& r) {
  return "job " + std::to_string(r.job) + " (" + std::string{to_string(r.kind)} +
         ") failed: " + outcome_text(r);
}

// Both scopes' instances; the header declares the templates.
template std::string outcome_text(const rank_job_result&);
template std::string outcome_text(const job_result&);
template std::string failure_line(const rank_job_result&);
template std::string failure_line(const job_result&);

}  // namespace kvc
