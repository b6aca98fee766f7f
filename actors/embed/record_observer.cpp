#include "actors/embed/record_observer.hpp"

#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "actors/record/recording_core.hpp"
#include "proto/private_files.hpp"

namespace kvc::embed {

result<std::unique_ptr<record_observer>> record_observer::start(
    const scheduler_connector_config& cfg, coordinator::blocking_coordinator& coord) {
  const observe_config& o = cfg.observe;
  const std::string dir = o.record_dir.empty() ? o.trace_dir : o.record_dir;
  if (auto st = make_private_dir(dir); !st) {
    return make_error(st.code(), "record: " + st.message());
  }
  const std::string path = dir + "/scheduler-" + std::to_string(::getpid()) + ".kvcrec";
  auto opened = record::recorder::open(path, {cfg.planner, coord.options()});
  if (!opened) return opened.error();
  std::shared_ptr<record::recorder> rec = std::move(opened).value();
  coord.wrap_core([&rec](std::unique_ptr<coordinator::step_core> core) {
    return std::make_unique<record::recording_core>(std::move(core), rec);
  });
  spdlog::info("scheduler_connector: recording the run to {}", path);
  return std::unique_ptr<record_observer>{new record_observer(std::move(rec))};
}

status record_observer::admit_outside_results() {
  return make_error(errc::precondition_failed,
                    "embed: job results from outside the step channel cannot be recorded "
                    "(observe.record is on)");
}

void record_observer::on_stopped() {
  if (auto st = rec_->close(); !st) spdlog::error("{}", st.to_string());
}

}  // namespace kvc::embed
