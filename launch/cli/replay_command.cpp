// `kvconnect replay [FILE|-]`: drives an offload manager from JSON lines, one op per line, and
// prints one answer line per op (the protocol of docs and tests/scheduler/replay/). A bad line
// gets {"error": "..."} and changes nothing; the exit code is 1 if any line failed.
// `kvconnect replay --connector [FILE|-]`: a vLLM connector trace through the planner instead
// (connector_replay.hpp, docs/planner.md).
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "launch/cli/commands.hpp"
#include "launch/replay/connector_replay.hpp"
#include "launch/replay/replay_session.hpp"

namespace kvc::launch {

void add_replay_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "replay", "Answer offload-manager ops given as JSON lines (FILE or - for stdin)");
  auto file = std::make_shared<std::string>("-");
  auto connector = std::make_shared<bool>(false);
  cmd->add_option("file", *file, "JSON-lines op file; - reads stdin")->capture_default_str();
  cmd->add_flag("--connector", *connector,
                "FILE is a vLLM connector trace (.jsonl or .jsonl.gz): replay it through the "
                "planner, one answer line per connector call (docs/planner.md)");
  cmd->callback([file, connector, &exit_code] {
    bool ok;
    if (*connector) {
      auto in = open_byte_source(*file);
      if (!in) throw std::runtime_error("replay: " + in.error().message());
      ok = replay_connector_trace(**in, std::cout);
    } else {
      auto in = open_byte_source(*file);
      if (!in) throw std::runtime_error("replay: " + in.error().message());
      ok = replay_manager_ops(**in, std::cout);
    }
    exit_code = ok ? 0 : 1;
  });
}

}  // namespace kvc::launch
