#include "launch/supervisor/progress_display.hpp"

#include <algorithm>
#include <cstdio>

namespace kvc::launch {

namespace {

std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

uint64_t count(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return 0;
  return it->is_number_unsigned() ? it->get<uint64_t>()
                                  : static_cast<uint64_t>(std::max<int64_t>(0, it->get<int64_t>()));
}

}  // namespace

std::string progress_text(const nlohmann::json& j, double steps_per_second) {
  std::string line = "progress: step " + std::to_string(count(j, "step"));
  if (j.contains("steps")) {
    line += "/" + std::to_string(count(j, "steps"));
    // The simulated engine's drain: steps past the arrivals while what arrived finishes.
    if (count(j, "step") > count(j, "steps")) line += " (draining)";
  }
  line += ", " + fixed1(steps_per_second) + " steps/s";
  if (j.contains("requests_finished")) {
    line += ", requests finished " + std::to_string(count(j, "requests_finished"));
  }
  if (j.contains("cpu_hit_tokens") && j.contains("prefill_tokens_computed")) {
    const double hit = static_cast<double>(count(j, "cpu_hit_tokens"));
    const double all = hit + static_cast<double>(count(j, "prefill_tokens_computed"));
    line += ", cpu hit " + fixed1(all > 0 ? 100.0 * hit / all : 0.0) + "%";
  }
  if (j.contains("jobs_ok")) line += ", jobs ok " + std::to_string(count(j, "jobs_ok"));
  if (j.contains("jobs_failed")) line += ", jobs failed " + std::to_string(count(j, "jobs_failed"));
  return line;
}

std::optional<std::string> progress_display::on_progress(const nlohmann::json& j,
                                                         clock::time_point now) {
  const uint64_t step = count(j, "step");
  if (!first_) first_ = {now, step};
  if (!terminal_) {
    if (interval_.count() == 0) return std::nullopt;
    if (last_shown_ && now - *last_shown_ < interval_) return std::nullopt;
  }
  last_shown_ = now;
  const double seconds = std::chrono::duration<double>(now - first_->first).count();
  const double rate = seconds > 0 ? static_cast<double>(step - first_->second) / seconds : 0.0;
  const std::string text = "kvconnect launch: " + progress_text(j, rate);
  if (!terminal_) return text + "\n";
  open_ = true;
  return "\r" + text + "\033[K";
}

std::string progress_display::close() {
  if (!open_) return "";
  open_ = false;
  return "\n";
}

}  // namespace kvc::launch
