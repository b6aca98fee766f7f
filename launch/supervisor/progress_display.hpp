#pragma once
/// progress_display: the launch's live progress display, made from the scheduler process's
/// `{"event":"progress",...}` lines (one per step). On a terminal one line is rewritten at every
/// step ('\r' + text + erase to the end of the line); otherwise a plain line every `interval`
/// (0: none), the first step's always.
///
/// Pure: the time is passed in and the text returned; the launcher writes it to stderr.
/// Not thread-safe: the launcher's poll loop owns it.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kvc::launch {

/// One progress line's text: "progress: step 120/200, 74.2 steps/s, requests finished 31,
/// cpu hit 12.5%, jobs failed 0" (the fields the line has; the cpu hit share of the prefill
/// tokens when it has cpu_hit_tokens and prefill_tokens_computed; "step 230/200 (draining)"
/// past the steps with arrivals).
std::string progress_text(const nlohmann::json& progress, double steps_per_second);

class progress_display {
 public:
  using clock = std::chrono::steady_clock;

  progress_display(bool terminal, std::chrono::milliseconds interval)
      : terminal_(terminal), interval_(interval) {}

  /// What to write for the progress line `progress` (which has "step") at `now`; nullopt:
  /// nothing now. Without a terminal the text ends with a newline.
  std::optional<std::string> on_progress(const nlohmann::json& progress, clock::time_point now);
  /// "\n" when a rewritten line is open (before other output goes to the terminal), else "".
  std::string close();

 private:
  bool terminal_;
  std::chrono::milliseconds interval_;
  bool open_ = false;  ///< a rewritten line waits for its newline
  std::optional<std::pair<clock::time_point, uint64_t>> first_;  ///< the first progress seen
  std::optional<clock::time_point> last_shown_;
};

}  // namespace kvc::launch
