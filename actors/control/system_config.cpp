#include "actors/control/system_config.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include "actors/control/error_bridge.hpp"
#include "actors/control/interfaces.hpp"

namespace kvc::control {

void add_message_types(caf::actor_system_config& cfg) {
  // Each call also registers std::vector<T> (and stream<T>) as "std::vector<NAME>".
  cfg.add_message_type<worker_registration>("kvc::worker_registration");
  cfg.add_message_type<worker_actor>("kvc::worker_actor");
  cfg.add_message_type<coordinator_actor>("kvc::coordinator_actor");
  cfg.add_message_type<scheduler_actor>("kvc::scheduler_actor");
  // CAF 0.17.6's add_error_category<T>(atom) builds a renderer of the wrong signature and does
  // not compile; register an explicit one.
  cfg.add_error_category(error_category,
                         [](uint8_t code, caf::atom_value, const caf::message& ctx) {
                           return render_kvc_error(code, ctx);
                         });
}

void apply_preset(caf::actor_system_config& cfg, const system_options& opts) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", opts.max_threads);
  cfg.set("middleman.heartbeat-interval", caf::timespan{opts.heartbeat_interval});
  cfg.set("middleman.connection-timeout", caf::timespan{opts.connection_timeout});
  cfg.set("middleman.app-identifiers", std::vector<std::string>{opts.app_identifier});
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console", caf::atom("none"));
}

void load_network(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
}

void configure(caf::actor_system_config& cfg, const system_options& opts, bool network) {
  add_message_types(cfg);
  apply_preset(cfg, opts);
  if (network) load_network(cfg);
}

}  // namespace kvc::control
