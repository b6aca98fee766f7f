#include "actors/embed/trace_observer.hpp"

#include <algorithm>
#include <utility>

#include "actors/trace/traced_transport.hpp"

namespace kvc::embed {

void trace_observer::on_step_built(const scheduler::step_input& in,
                                   const connector_metadata* meta) {
  if (!tracer_ || meta == nullptr || !tracer_->jobs()) return;
  for (const auto* list : {&meta->loads, &meta->stores}) {
    for (const transfer_job& j : *list) {
      const uint64_t blocks = j.slots.size() - std::min<size_t>(j.skip, j.slots.size());
      job("job_planned", in.step, j.id, j.request_id, blocks * slot_bytes_,
          std::string{to_string(j.kind)});
    }
  }
  for (const tier_job& j : meta->tier_jobs) {
    const uint64_t blocks = j.kind == transfer_kind::check ? 0 : j.keys.size();
    job("job_planned", in.step, j.id, {}, blocks * slot_bytes_, std::string{to_string(j.kind)},
        trace::tier_track(j.kind));
  }
}

void trace_observer::on_step_sent(const connector_metadata& meta, int64_t started) {
  if (tracer_) span("build_connector_meta", meta.step, started, trace::tracer::mono_now());
}

void trace_observer::on_output_applied(const connector_output& out, int64_t started) {
  if (!tracer_) return;
  const int64_t end = trace::tracer::mono_now();
  if (tracer_->jobs()) {
    for (const job_result& j : out.jobs) {
      job("job_applied", out.step, j.job, {}, j.bytes, outcome_text(j),
          is_gpu_transfer(j.kind) ? std::string{"scheduler"} : trace::tier_track(j.kind));
    }
  }
  span("output_applied", out.step, started, end);
}

void trace_observer::on_reset(bool ok, step_id last_step) {
  if (!tracer_ || !ok) return;
  const int64_t now = trace::tracer::mono_now();
  span("reset_cache", last_step, now - 1, now);
}

void trace_observer::span(const char* type, step_id step, int64_t started, int64_t end) {
  trace::trace_record r;
  r.mono_ns = end;
  r.dur_ns = std::max<int64_t>(end - started, 1);
  r.track = "scheduler";
  r.type = type;
  r.step = static_cast<int64_t>(step);
  r.value = static_cast<int64_t>(planner_.jobs_in_flight());
  tracer_->emit(std::move(r));
  if (!tracer_->jobs()) return;
  trace::trace_record pool;
  pool.mono_ns = end;
  pool.track = "scheduler";
  pool.type = "pool_slots";
  pool.step = static_cast<int64_t>(step);
  pool.value = static_cast<int64_t>(planner_.manager().size());
  pool.bytes = planner_.manager().capacity();
  tracer_->emit(std::move(pool));
}

void trace_observer::job(const char* type, step_id step, job_id id, const std::string& request,
                         uint64_t bytes, std::string note, std::string track) {
  trace::trace_record r;
  r.track = std::move(track);
  r.type = type;
  r.step = static_cast<int64_t>(step);
  r.job = static_cast<int64_t>(id);
  r.request = request;
  r.bytes = bytes;
  r.note = std::move(note);
  tracer_->emit(std::move(r));
}

}  // namespace kvc::embed
