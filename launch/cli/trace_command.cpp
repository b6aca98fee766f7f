// `kvconnect trace export DIR -o trace.json` and `kvconnect trace summary DIR [--request ID]`:
// the trace files a run wrote with observe.trace / --trace (docs/observability.md) as one Chrome
// trace-event document (chrome_trace.hpp) or as per-step timings (trace_summary.hpp).
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "launch/cli/commands.hpp"
#include "launch/trace/chrome_trace.hpp"
#include "launch/trace/trace_file.hpp"
#include "launch/trace/trace_summary.hpp"

namespace kvc::launch {

namespace {

struct trace_options {
  std::string dir;
  std::string output;
  std::string request;
};

result<trace_set> load(const std::string& dir) {
  auto set = read_trace_dir(dir);
  if (set && set->cut_lines > 0) {
    std::cerr << "kvconnect trace: " << set->cut_lines
              << " last line(s) cut short (a process ended mid-write) were skipped\n";
  }
  return set;
}

int run_export_command(const trace_options& o) {
  auto set = load(o.dir);
  if (!set) {
    std::cerr << "kvconnect trace export: " << set.error().message() << "\n";
    return 1;
  }
  const auto doc = to_chrome_trace(*set);
  std::ofstream out{o.output, std::ios::trunc};
  if (!out) {
    std::cerr << "kvconnect trace export: cannot write " << o.output << "\n";
    return 1;
  }
  out << doc.dump() << "\n";
  out.close();
  if (!out) {
    std::cerr << "kvconnect trace export: writing " << o.output << " failed\n";
    return 1;
  }
  std::cout << "wrote " << o.output << ": " << set->records.size() << " records of "
            << set->processes.size() << " processes, "
            << doc["otherData"]["linked_messages"].get<size_t>()
            << " messages linked send to receive\n";
  return 0;
}

int run_summary_command(const trace_options& o) {
  auto set = load(o.dir);
  if (!set) {
    std::cerr << "kvconnect trace summary: " << set.error().message() << "\n";
    return 1;
  }
  if (!o.request.empty()) {
    auto path = request_path(*set, o.request);
    if (!path) {
      std::cerr << "kvconnect trace summary: " << path.error().message() << "\n";
      return 1;
    }
    std::cout << *path;
    return 0;
  }
  std::cout << format_summary(summarize_steps(*set));
  return 0;
}

}  // namespace

void add_trace_command(CLI::App& app, int& exit_code) {
  auto* trace = app.add_subcommand("trace", "Export or summarize a run's message traces");
  trace->require_subcommand(1);

  auto e = std::make_shared<trace_options>();
  auto* ex = trace->add_subcommand(
      "export", "Merge the trace files of DIR into one Chrome trace-event JSON (Perfetto)");
  // The directory is checked by read_trace_dir, which names why it cannot be read (missing, a
  // symlink loop, not a directory).
  ex->add_option("dir", e->dir, "The trace directory (observe.trace_dir / --trace)")->required();
  ex->add_option("-o,--output", e->output, "The JSON file to write")->required();
  ex->callback([e, &exit_code] { exit_code = run_export_command(*e); });

  auto s = std::make_shared<trace_options>();
  auto* su = trace->add_subcommand(
      "summary", "Per step: metadata sent to output applied, by phase and rank; p50/p99");
  su->add_option("dir", s->dir, "The trace directory (observe.trace_dir / --trace)")->required();
  su->add_option("--request", s->request,
                 "Instead: this request's path across the processes (needs trace level jobs)");
  su->callback([s, &exit_code] { exit_code = run_summary_command(*s); });
}

}  // namespace kvc::launch
