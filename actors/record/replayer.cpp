#include "actors/record/replayer.hpp"

#include <cstdio>
#include <type_traits>

#include "actors/coordinator/step_coordinator.hpp"
#include "actors/scheduler/planner.hpp"

namespace kvc::record {

namespace {

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string opt(std::optional<uint32_t> v) { return v ? std::to_string(*v) : "ask-again"; }

/// The first field whose digest differs, as (name, detail); nullopt when all agree.
template <class Digest>
std::optional<std::pair<std::string, std::string>> first_field(const char* prefix,
                                                               const Digest& recorded,
                                                               const Digest& replayed) {
  for (size_t i = 0; i < recorded.fields.size(); ++i) {
    if (recorded.fields[i] != replayed.fields[i]) {
      return std::pair{std::string{prefix} + "." + std::string{Digest::names[i]},
                       "recorded digest " + hex(recorded.fields[i]) + ", replayed " +
                           hex(replayed.fields[i])};
    }
  }
  return std::nullopt;
}

class driver {
 public:
  driver(std::unique_ptr<scheduler::planner> p, coordinator::step_coordinator c,
         const std::function<void(std::string_view)>& line)
      : planner_(std::move(p)), coord_(std::move(c)), line_(line) {}

  /// Applies one event; a divergence stops the replay.
  std::optional<divergence> apply(uint64_t index, const record_event& ev) {
    index_ = index;
    std::optional<divergence> d = std::visit([&](const auto& e) { return on(e); }, ev);
    (void)coord_.take_notes();  // the live coordinator logs them; nothing to compare
    return d;
  }

  replay_result result;

 private:
  divergence diverged(std::string field, std::string detail) const {
    return {index_, step_, std::move(field), std::move(detail)};
  }

  std::optional<divergence> on(const match_event& e) {
    const auto got = planner_->get_num_new_matched_tokens(e.req.view(), e.num_computed);
    if (got.tokens != e.tokens) {
      return diverged("match.tokens", "request " + e.req.id + ": recorded " + opt(e.tokens) +
                                          ", replayed " + opt(got.tokens));
    }
    return std::nullopt;
  }

  std::optional<divergence> on(const alloc_event& e) {
    const status st = e.with_table ? planner_->update_state_after_alloc(
                                         e.req.view(), {e.block_ids, e.hashed}, e.num_external)
                                   : planner_->update_state_after_alloc(
                                         e.req.view(), e.block_ids, e.num_external);
    if (st.ok() != e.ok) {
      return diverged("alloc.status", "request " + e.req.id + ": recorded " +
                                          (e.ok ? "ok" : "refused") + ", replayed " +
                                          (st.ok() ? "ok" : st.to_string()));
    }
    return std::nullopt;
  }

  std::optional<divergence> on(const build_event& e) {
    step_ = e.step;
    const auto fresh = views(e.new_requests);
    const auto cached = views(e.cached_requests);
    const auto preempted = views(e.preempted);
    auto meta = planner_->build_connector_meta({e.step, fresh, cached, preempted});
    ++result.steps;
    if (meta.ok() != e.ok) {
      return diverged("metadata.status", std::string{"recorded "} + (e.ok ? "built" : "refused") +
                                             ", replayed " +
                                             (meta ? "built" : meta.error().to_string()));
    }
    if (!meta) return std::nullopt;
    const metadata_digest got = digest_of(*meta);
    if (line_) line_("step " + std::to_string(e.step) + " digest " + hex(got.combined()));
    if (auto f = first_field("metadata", e.digest, got)) return diverged(f->first, f->second);
    last_meta_ = std::move(meta).value();
    return std::nullopt;
  }

  std::optional<divergence> on(const finished_event& e) {
    const bool got = planner_->request_finished(e.id);
    if (got != e.delay_free) {
      return diverged("finished.delay_free", "request " + e.id + ": recorded " +
                                                 std::to_string(e.delay_free) + ", replayed " +
                                                 std::to_string(got));
    }
    return std::nullopt;
  }

  std::optional<divergence> on(const request_output_event& e) {
    const auto sending = views(e.finished_sending);
    const auto recving = views(e.finished_recving);
    (void)planner_->update_connector_output(
        scheduler::request_output{sending, recving, e.role, e.invalid_block_ids});
    coord_.forget_jobs(planner_->jobs_completed_by_engine());  // as the facade does
    return std::nullopt;
  }

  std::optional<divergence> on(const take_completions_event&) {
    (void)planner_->take_request_completions();
    return std::nullopt;
  }

  std::optional<divergence> on(const reset_event& e) {
    const status st = planner_->reset();
    if (st.ok() != e.ok) {
      return diverged("reset.status", std::string{"recorded "} + (e.ok ? "ok" : "refused") +
                                          ", replayed " + (st.ok() ? "ok" : st.to_string()));
    }
    return std::nullopt;
  }

  std::optional<divergence> on(const expect_event& e) {
    if (!last_meta_ || last_meta_->step != e.step) {
      return diverged("expect.step", "the coordinator expected step " + std::to_string(e.step) +
                                         ", the replay built " +
                                         (last_meta_ ? std::to_string(last_meta_->step) : "none"));
    }
    coord_.expect(*last_meta_, e.now);
    return std::nullopt;
  }

  std::optional<divergence> on(const report_event& e) {
    coord_.report(e.report);
    return std::nullopt;
  }
  std::optional<divergence> on(const rank_up_event& e) {
    coord_.rank_up(e.rank, e.incarnation);
    return std::nullopt;
  }
  std::optional<divergence> on(const rank_down_event& e) {
    coord_.rank_down(e.rank);
    return std::nullopt;
  }
  std::optional<divergence> on(const tick_event& e) {
    coord_.tick(e.now);
    return std::nullopt;
  }

  std::optional<divergence> on(const poll_event& e) {
    auto out = coord_.poll_output();
    if (out.has_value() != e.released) {
      return diverged("output.released", std::string{"recorded "} +
                                             (e.released ? "an output" : "none") + ", replayed " +
                                             (out ? "the output of step " +
                                                        std::to_string(out->step)
                                                  : std::string{"none"}));
    }
    if (!out) return std::nullopt;
    ++result.outputs;
    const output_digest got = digest_of(*out);
    if (line_) line_("output " + std::to_string(out->step) + " digest " + hex(got.combined()));
    if (auto f = first_field("output", e.digest, got)) return diverged(f->first, f->second);
    (void)planner_->update_connector_output(*out);  // rejections: logged by the live run only
    return std::nullopt;
  }

  std::unique_ptr<scheduler::planner> planner_;
  coordinator::step_coordinator coord_;
  const std::function<void(std::string_view)>& line_;
  std::optional<connector_metadata> last_meta_;
  uint64_t index_ = 0;
  step_id step_ = 0;
};

}  // namespace

result<replay_result> replay(const run_record& rec,
                             const std::function<void(std::string_view)>& line) {
  auto p = scheduler::planner::create(rec.header.config.planner);
  if (!p) return make_error(p.error().code(), "record config: " + p.error().message());
  auto c = coordinator::step_coordinator::create(rec.header.config.coordinator);
  if (!c) return make_error(c.error().code(), "record config: " + c.error().message());
  driver d(std::move(p).value(), std::move(c).value(), line);
  for (uint64_t i = 0; i < rec.events.size(); ++i) {
    if (auto div = d.apply(i, rec.events[i])) {
      d.result.first = std::move(div);
      break;
    }
  }
  return d.result;
}

std::string describe(const divergence& d) {
  return "divergence at step " + std::to_string(d.step) + " (event " + std::to_string(d.event) +
         "): " + d.field + " differs: " + d.detail;
}

}  // namespace kvc::record
