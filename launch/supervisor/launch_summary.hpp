#pragma once
/// The simulated engine's launch summary: the scheduler's "sim" line and the node's workers'
/// "runner" lines folded into the summary (load checks, the launch's connector share), and its
/// human table. Pure functions over JSON lines, apart from print_sim_table (stderr).
#include <cstddef>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvc::launch {

/// The workers' load checks summed from their "runner" lines (loads_verified, load_mismatches,
/// step_errors, ranks_reported, steps: the most any rank ran). False when a worker's line is
/// missing or reports a mismatch.
bool add_runner_checks(nlohmann::json& summary, const std::vector<nlohmann::json>& runners,
                       size_t ranks);

/// The connector's share of the launch: the scheduler's connector time (its "sim" line) and
/// `rank_connector_ns`, each step's slowest rank of this node summed over the steps (the
/// workers' "connector_steps" lines through slowest_rank_sum), over the simulated time.
void add_connector_share(nlohmann::json& summary, const nlohmann::json& sim,
                         double rank_connector_ns);

/// The simulated engine's summary fields: on node 0 the scheduler's "sim" line and the connector
/// share, on every node the checks of the node's workers. False when they fail
/// (add_runner_checks).
bool add_sim_figures(nlohmann::json& summary, const std::optional<nlohmann::json>& sim,
                     const std::vector<nlohmann::json>& runners, size_t ranks,
                     double rank_connector_ns);

/// The human table of a simulated run's summary, on stderr.
void print_sim_table(const nlohmann::json& summary);

}  // namespace kvc::launch
