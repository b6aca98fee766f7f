#pragma once
/// exposition: builds one scrape's worth of metric families and renders them in Prometheus's
/// text exposition format (version 0.0.4): per family a `# HELP` and a `# TYPE` line, then its
/// samples; a histogram's samples are `<name>_bucket{le="..."}` (cumulative, ending in +Inf),
/// `<name>_sum` and `<name>_count`. A counter's samples get the `_total` suffix when its name
/// lacks one, as Prometheus's client libraries (vLLM's included) expose them.
///
/// Names are checked (metric: [a-zA-Z_:][a-zA-Z0-9_:]*, label: [a-zA-Z_][a-zA-Z0-9_]*, not
/// starting with "__", no `le` on histograms); a bad one is an errc::invalid_argument from
/// add_* and nothing is added. Label values and HELP text are escaped (backslash, double quote
/// in label values, newline).
///
/// Pure: no I/O. Not thread-safe: build and render on one thread.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/metrics/histogram.hpp"
#include "proto/status.hpp"

namespace kvc::metrics {

enum class metric_type : uint8_t { counter = 0, gauge = 1, histogram = 2 };

/// Label name / value pairs of one series, in the order they are rendered.
using labels = std::vector<std::pair<std::string, std::string>>;

class exposition {
 public:
  /// Starts a family; the samples added next with the same name belong to it. A family name
  /// may be declared once.
  status add_family(std::string_view name, metric_type type, std::string_view help);
  /// A counter or gauge sample of family `name` (declared before).
  status add_value(std::string_view name, const labels& lbl, double value);
  /// A histogram sample of family `name` (declared before as a histogram).
  status add_histogram(std::string_view name, const labels& lbl, const histogram& h);

  /// The text of every family in declaration order (families without samples keep their HELP
  /// and TYPE lines).
  std::string render() const;

  static bool valid_metric_name(std::string_view s) noexcept;
  static bool valid_label_name(std::string_view s) noexcept;
  /// "a\"b\\c\nd" -> a\"b\\c\nd (backslash, quote and newline escaped).
  static std::string escape_label_value(std::string_view s);
  /// Whole numbers below 1e15 as integers, others as the shortest text that reads back as the
  /// same double; +Inf, -Inf, NaN as Prometheus spells them.
  static std::string format_value(double v);

 private:
  struct family {
    std::string name;
    metric_type type;
    std::string help;
    std::string samples;  // rendered sample lines
  };
  result<family*> find(std::string_view name, bool histogram_wanted);
  static status check_labels(const labels& lbl, metric_type type);

  std::vector<family> families_;
};

}  // namespace kvc::metrics
