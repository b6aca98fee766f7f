// `kvconnect replay-run DIR|FILE [--quiet]`: re-drives the pure planner and step coordinator
// from a run record (observe.record; actors/record/) and checks that every step's metadata and
// every released output are identical to the recorded run's (docs/observability.md "Replay").
// A directory: every *.kvcrec file in it, in name order. Exit 0 identical, 1 divergent (the
// first divergence names the step and the field), 2 unreadable or refused (schema, config
// digest, bad bytes).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "actors/record/record_reader.hpp"
#include "actors/record/replayer.hpp"
#include "launch/cli/commands.hpp"

namespace kvc::launch {

namespace {

/// The record files `target` names (empty when a directory holds none), or why the directory
/// cannot be read.
result<std::vector<std::string>> record_files(const std::string& target) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(target, ec)) return std::vector<std::string>{target};
  std::vector<std::string> files;
  for (fs::directory_iterator it{target, ec}, end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".kvcrec") files.push_back(it->path().string());
  }
  if (ec) return make_error(errc::io_error, "cannot read " + target + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

/// Replays one file; its exit code.
int replay_file(const std::string& path, bool quiet) {
  auto rec = record::read_record_file(path);
  if (!rec) {
    std::cerr << "kvconnect replay-run: " << rec.error().message() << "\n";
    return 2;
  }
  std::function<void(std::string_view)> line;
  if (!quiet) line = [](std::string_view l) { std::cout << l << "\n"; };
  auto r = record::replay(*rec, line);
  if (!r) {
    std::cerr << "kvconnect replay-run: " << path << ": " << r.error().message() << "\n";
    return 2;
  }
  if (r->first) {
    std::cout << path << ": " << record::describe(*r->first) << std::endl;
    return 1;
  }
  std::cout << path << ": identical: " << r->steps << " steps, " << r->outputs << " outputs, "
            << rec->events.size() << " events" << std::endl;
  return 0;
}

}  // namespace

void add_replay_run_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "replay-run",
      "Re-drive the planner and coordinator from a run record (observe.record) and check every "
      "step's metadata and output (exit 0 identical, 1 divergent, 2 unreadable)");
  auto target = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("record", *target, "A record file or a directory of *.kvcrec files")
      ->required();
  cmd->add_flag("--quiet", *quiet, "Print only the result, not a line per step");
  cmd->callback([target, quiet, &exit_code] {
    const auto files = record_files(*target);
    if (!files) {
      std::cerr << "kvconnect replay-run: " << files.error().message() << "\n";
      exit_code = 2;
      return;
    }
    if (files->empty()) {
      std::cerr << "kvconnect replay-run: no *.kvcrec file in " << *target << "\n";
      exit_code = 2;
      return;
    }
    int worst = 0;
    for (const auto& f : *files) worst = std::max(worst, replay_file(f, *quiet));
    exit_code = worst;
  });
}

}  // namespace kvc::launch
