// kvconnect.SchedulerConnector: embed::scheduler_connector for Python (docs/python.md). Requests
// are passed as their fields (id, block hashes, token count), block ids as ints; results come
// back as Python lists, ints and strs. Every call that can wait releases the GIL.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "actors/embed/scheduler_connector.hpp"
#include "launch/config/launch_plan.hpp"
#include "python/src/bindings.hpp"
#include "python/src/block_hashes.hpp"
#include "python/src/errors.hpp"
#include "python/src/request_cache.hpp"
#include "python/src/step_requests.hpp"

namespace kvc::python {
namespace py = pybind11;

namespace {

using embed::scheduler_connector;
using std::chrono::duration_cast;

std::chrono::nanoseconds seconds(double s) {
  if (!(s >= 0)) throw py::value_error("a timeout must be >= 0 seconds");
  return duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

/// Sets `o.name` (an interned str) to `value`.
void set_attr(py::handle o, PyObject* name, const py::object& value) {
  if (PyObject_SetAttr(o.ptr(), name, value.ptr()) != 0) throw py::error_already_set();
}

/// vLLM's KVConnectorOutput.invalid_block_ids (a set of ints; None or absent: none) into `ids`.
void read_invalid_blocks(py::handle out, std::vector<gpu_block>& ids) {
  ids.clear();
  const py::object got = py::getattr(out, vllm_field_names().invalid_block_ids, py::none());
  if (got.is_none()) return;
  for (py::handle b : got) {
    if (!PyLong_Check(b.ptr()) || PyBool_Check(b.ptr())) {
      throw py::type_error("KVConnectorOutput.invalid_block_ids: a block id must be an int, got " +
                           std::string(Py_TYPE(b.ptr())->tp_name));
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(b.ptr());
    if ((v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) || v > UINT32_MAX) {
      PyErr_Clear();
      throw py::value_error("KVConnectorOutput.invalid_block_ids: block id " +
                            py::repr(b).cast<std::string>() + " is out of range");
    }
    ids.push_back(static_cast<gpu_block>(v));
  }
}

/// Sets a flag for its lifetime.
struct flag_set {
  explicit flag_set(bool& f) : flag(f) { flag = true; }
  ~flag_set() { flag = false; }
  flag_set(const flag_set&) = delete;
  flag_set& operator=(const flag_set&) = delete;
  bool& flag;
};

/// A call's section that runs with the GIL released: `busy` is set (under the GIL) until the
/// GIL is back.
struct unlocked_section {
  explicit unlocked_section(bool& busy) : set(busy) {}
  flag_set set;  // first: set before the GIL goes, cleared after it is back
  py::gil_scoped_release release;
};

/// The Python object: the facade and what it keeps of the requests (request_cache).
class py_scheduler {
 public:
  py_scheduler(const config_handle& cfg, const std::optional<std::string>& instance,
               const std::optional<std::string>& token, bool listen, const std::string& transport,
               bool create_or_attach, bool kv_events) {
    const std::string inst = instance.value_or(cfg.config.runtime.instance);
    const std::string tok = token.value_or(cfg.config.runtime.token);
    if (inst.empty()) raise_config({{"runtime.instance", "names the node's segment: needed"}});
    if (tok.empty()) raise_config({{"runtime.token", "the deployment's shared secret: needed"}});
    auto plan = take(launch::make_plan(cfg.config, inst, tok, launch::config_use::engine));
    embed::scheduler_connector_config c = std::move(plan.scheduler);
    c.listen = listen;
    c.pool.create_or_attach = create_or_attach;
    c.faults = faults_at_site(cfg, fault_site::channel);
    // The pool's events are recorded for take_events, or for kvconnect's own publisher.
    c.planner.manager.enable_events = kv_events || !c.observe.kv_events_endpoint.empty();
    if (transport == "memory") {
      c.transport = embed::step_transport::memory;
    } else if (transport != "zmq") {
      throw py::value_error("transport is \"zmq\" or \"memory\", not \"" + transport + "\"");
    }
    result<std::unique_ptr<scheduler_connector>> made = make_error(errc::internal, "");
    {
      py::gil_scoped_release unlocked;
      made = scheduler_connector::create(c);
    }
    sc_ = take(std::move(made));
    gpu_block_size_ = sc_->planner().geometry().gpu_block_size;
  }

  ~py_scheduler() {
    py::gil_scoped_release unlocked;  // the destructor stops the actors and waits for them
    sc_.reset();
  }

  /// One thread calls the object: a call that changes the request entries, from another thread
  /// while a call runs with the GIL released (a step's plan reads views of the entries' strs
  /// and keys), is a RuntimeError, not a race.
  void enter() const {
    if (busy_) {
      throw std::runtime_error(
          "kvconnect.SchedulerConnector: called from another thread while a call of it runs "
          "(one thread calls it)");
    }
  }

  scheduler_connector& sc() {
    if (!sc_) raise(make_error(errc::precondition_failed, "the connector was shut down"));
    return *sc_;
  }

  scheduler::request_view view(uint32_t at, std::string_view id, py::handle hashes,
                               uint32_t num_tokens, bool remote_decode) {
    return {id, cache_.keys(at, hashes), num_tokens, remote_decode};
  }

  /// The view of vLLM's Request of the entry `at` (read_vllm_request), `num_tokens` read now.
  scheduler::request_view vllm_view(uint32_t at, uint32_t num_tokens) {
    const request_cache::entry& e = cache_.at(at);
    return view(at, e.id_text, e.hashes, num_tokens, e.remote_decode);
  }

  py::tuple match(const std::string& id, py::handle hashes, uint32_t num_tokens,
                  uint32_t num_computed, bool remote_decode) {
    enter();  // before the request entries change
    const uint32_t at = cache_.find_or_create(id);
    cache_.at(at).num_computed = num_computed;
    return answer(sc().get_num_new_matched_tokens(view(at, id, hashes, num_tokens, remote_decode),
                                                  num_computed));
  }

  py::tuple vllm_match(py::handle request, uint32_t num_computed) {
    enter();  // before the request entries change
    const uint32_t num_tokens = read_vllm_num_tokens(request);
    const uint32_t at = read_vllm_request(request, cache_);
    cache_.at(at).num_computed = num_computed;
    return answer(sc().get_num_new_matched_tokens(vllm_view(at, num_tokens), num_computed));
  }

  /// Reads of `blocks` only what R1's update_state_after_alloc reads (read_vllm_blocks): none
  /// when there is nothing to load, else up to the request's num_gpu_blocks, cdiv(num_computed
  /// of its last get_num_new_matched_tokens + num_external, gpu_block_size). The planner's
  /// answer depends on no other block: it loads into the blocks from the first one to fill up
  /// to num_gpu_blocks, and keeps the table only until the step that schedules the request
  /// gives all of its blocks (build_connector_meta).
  void vllm_alloc(py::handle request, py::handle blocks, uint32_t num_external) {
    enter();  // before the request entries change
    const uint32_t num_tokens = read_vllm_num_tokens(request);
    const uint32_t at = read_vllm_request(request, cache_);
    if (num_external == 0) {
      block_ids_.clear();
      hashed_.clear();
    } else {
      const uint64_t cached = uint64_t{cache_.at(at).num_computed} + num_external;
      read_vllm_blocks(blocks, (cached + gpu_block_size_ - 1) / gpu_block_size_, block_ids_,
                       hashed_);
    }
    check(sc().update_state_after_alloc(vllm_view(at, num_tokens), {block_ids_, hashed_},
                                        num_external));
  }

  /// vLLM's finished sets in, then the planner's answer written back over them for vLLM's
  /// scheduler to read (kvconnect.vllm's update_connector_output).
  void vllm_output(py::handle connector_output) {
    std::vector<py::object> held;
    read_vllm_finished(connector_output, sending_, recving_, held);
    read_invalid_blocks(connector_output, invalid_);
    check(sc().apply_request_output(sending_, recving_, invalid_));
    const embed::connector_update u = output(std::nullopt, 0.0);
    const scheduler::request_completions& c = u.completions;
    const vllm_names& n = vllm_field_names();
    set_attr(connector_output, n.finished_sending, set_or_none(c.finished_sending));
    set_attr(connector_output, n.finished_recving, set_or_none(c.finished_recving));
    if (c.invalid_block_ids.empty()) return;
    const py::object had = py::getattr(connector_output, n.invalid_block_ids, py::none());
    py::set invalid;
    if (!had.is_none()) {
      for (py::handle b : had) invalid.add(b);
    }
    for (const gpu_block b : c.invalid_block_ids) invalid.add(py::int_(b));
    set_attr(connector_output, n.invalid_block_ids, invalid);
  }

  void alloc(const std::string& id, py::handle hashes, uint32_t num_tokens,
             const std::vector<gpu_block>& block_ids,
             const std::optional<std::vector<bool>>& hashed, uint32_t num_external,
             bool remote_decode) {
    enter();  // before the request entries change
    const auto req = view(cache_.find_or_create(id), id, hashes, num_tokens, remote_decode);
    if (!hashed) {
      check(sc().update_state_after_alloc(req, block_ids, num_external));
      return;
    }
    const std::vector<uint8_t> flags(hashed->begin(), hashed->end());
    check(sc().update_state_after_alloc(req, {block_ids, flags}, num_external));
  }

  /// build_connector_meta of tuples (step_requests::read_tuples).
  connector_metadata build(step_id step, py::handle fresh, py::handle cached,
                           py::handle preempted) {
    enter();  // before the request entries change
    step_.read_tuples(fresh, cached, preempted, cache_);
    return plan(step);
  }

  /// build_connector_meta of vLLM's SchedulerOutput (step_requests::read_vllm).
  connector_metadata build_vllm(step_id step, py::handle scheduler_output, py::handle requests) {
    enter();  // before the request entries change
    step_.read_vllm(scheduler_output, requests, cache_,
                    sc().planner().geometry().offloaded_block_size);
    return plan(step);
  }

  embed::connector_update output(std::optional<step_id> step, double timeout) {
    const auto wait = seconds(timeout);
    scheduler_connector& s = sc();
    result<embed::connector_update> got = make_error(errc::internal, "");
    if (!step) {  // takes what has arrived and waits for nothing: the GIL stays held
      got = s.update_connector_output();
    } else {
      unlocked_section unlocked(busy_);
      got = s.update_connector_output(*step, wait);
    }
    return take(std::move(got));
  }

  void request_output(const std::vector<std::string>& sending,
                      const std::vector<std::string>& recving,
                      const std::vector<gpu_block>& invalid) {
    const std::vector<std::string_view> s(sending.begin(), sending.end());
    const std::vector<std::string_view> r(recving.begin(), recving.end());
    check(sc().apply_request_output(s, r, invalid));
  }

  void job_results(step_id step, py::handle results) {
    results_.step = step;
    results_.jobs.clear();
    read_job_results(results, results_.jobs);
    check(sc().apply_job_results(results_));
  }

  /// The id's text is read in place (vLLM's ids are longer than a std::string holds inline).
  bool finished(py::handle id_str) {
    enter();  // before the request entries change
    const std::string_view id = text_of(id_str, "req_id");
    cache_.forget(id);
    return sc().request_finished(id);
  }

  void reset() { check(sc().reset_cache()); }

  py::list events() {
    py::list out;
    for (const kv_event& e : sc().take_events()) {
      out.append(py::make_tuple(std::string(to_string(e.kind)), int_list(e.keys),
                                std::string(to_string(e.where))));
    }
    return out;
  }

  uint32_t shutdown(double timeout) {
    if (!sc_) return 0;
    const auto limit = duration_cast<std::chrono::milliseconds>(seconds(timeout));
    result<uint32_t> r = make_error(errc::internal, "");
    {
      unlocked_section unlocked(busy_);
      r = sc_->shutdown(limit);
    }
    return take(std::move(r));
  }

  void wait_for_workers(double timeout) {
    const auto limit = duration_cast<std::chrono::milliseconds>(seconds(timeout));
    scheduler_connector& s = sc();
    status st;
    {
      unlocked_section unlocked(busy_);
      st = s.wait_for_workers(limit);
    }
    check(st);
  }

  size_t cached_requests() const noexcept { return cache_.size(); }

 private:
  static py::tuple answer(const scheduler::match_result& m) {
    return py::make_tuple(m.tokens ? py::object(py::int_(*m.tokens)) : py::object(py::none()),
                          m.is_async);
  }

  /// A set of the strs, or None when there are none (vLLM's KVConnectorOutput convention).
  static py::object set_or_none(const std::vector<std::string>& ids) {
    if (ids.empty()) return py::none();
    py::set out;
    for (const std::string& id : ids) out.add(py::str(id));
    return out;
  }

  /// The facade's build_connector_meta of the step read into step_.
  connector_metadata plan(step_id step) {
    const std::span<const scheduler::scheduled_request> all(step_.requests);
    scheduler_connector& s = sc();
    result<connector_metadata> meta = make_error(errc::internal, "");
    {
      unlocked_section unlocked(busy_);  // the first step may wait for the ranks to join
      meta = s.build_connector_meta(
          {step, all.first(step_.num_new), all.subspan(step_.num_new), step_.preempted});
    }
    step_.held.clear();
    return take(std::move(meta));
  }

  std::unique_ptr<scheduler_connector> sc_;
  request_cache cache_;
  step_requests step_;  // the buffers of the last step read, reused
  uint32_t gpu_block_size_ = 1;
  std::vector<gpu_block> block_ids_;  // vllm_alloc's, reused
  std::vector<uint8_t> hashed_;
  std::vector<std::string_view> sending_, recving_;  // vllm_output's, reused
  std::vector<gpu_block> invalid_;                   // vllm_output's, reused
  connector_output results_;                         // job_results', reused
  bool busy_ = false;  // a call of this object runs with the GIL released (enter())
};

py::dict stats_dict(const scheduler::connector_stats& s) {
  py::dict d;
  d["lookups"] = s.lookups;
  d["hit_blocks"] = s.hit_blocks;
  d["deferred"] = s.deferred;
  d["loads_planned"] = s.loads_planned;
  d["load_blocks"] = s.load_blocks;
  d["stores_planned"] = s.stores_planned;
  d["store_blocks"] = s.store_blocks;
  d["store_retries"] = s.store_retries;
  d["loads_ok"] = s.loads_ok;
  d["loads_failed"] = s.loads_failed;
  d["stores_ok"] = s.stores_ok;
  d["stores_failed"] = s.stores_failed;
  d["rejected_results"] = s.rejected_results;
  d["resets"] = s.resets;
  d["stale_results"] = s.stale_results;
  d["loads_settled"] = s.loads_settled;
  d["settled_results"] = s.settled_results;
  return d;
}

py::dict fault_stats_dict(const embed::fault_stats& f) {
  py::dict d;
  d["injected"] = fault_counts_dict(f.injected);
  d["duplicates"] = f.duplicates;
  d["late_reports"] = f.late_reports;
  d["timed_out"] = f.timed_out;
  d["rejected_reports"] = f.rejected_reports;
  d["dropped_frames"] = f.dropped_frames;
  return d;
}

py::dict tables_dict(const scheduler_connector::table_sizes& t, size_t cached) {
  py::dict d;
  d["requests"] = t.planner.requests;
  d["request_slots"] = t.planner.request_slots;
  d["jobs"] = t.planner.jobs;
  d["loads"] = t.planner.loads;
  d["pending_loads"] = t.planner.pending_loads;
  d["owed_sending"] = t.planner.owed_sending;
  d["completions"] = t.planner.completions;
  d["finished_for_meta"] = t.planner.finished_for_meta;
  d["reset_flush"] = t.planner.reset_flush;
  d["failed_flush"] = t.planner.failed_flush;
  d["tier_jobs"] = t.planner.tier_jobs;
  d["promoting"] = t.planner.promoting;
  d["settled"] = t.planner.settled;
  d["awaiting_engine"] = t.planner.awaiting_engine;
  d["coordinator_jobs"] = t.coordinator_jobs;
  d["coordinator_deadlines"] = t.coordinator_deadlines;
  d["coordinator_ready_steps"] = t.coordinator_ready_steps;
  d["channel_queued_steps"] = t.channel_queued_steps;
  d["binding_requests"] = cached;
  return d;
}

/// JobResult and RankJobResult: the same read-only fields, kind and error as their names.
template <class Result>
void bind_job_result(py::module_& m, const char* name, const char* doc) {
  py::class_<Result>(m, name, doc)
      .def_readonly("job", &Result::job)
      .def_property_readonly("kind", [](const Result& j) { return std::string(to_string(j.kind)); })
      .def_readonly("ok", &Result::ok)
      .def_property_readonly("error",
                             [](const Result& j) { return std::string(to_string(j.error)); })
      .def_readonly("bytes", &Result::bytes)
      .def_readonly("seconds", &Result::seconds)
      .def_readonly("detail", &Result::detail);
}

void bind_metadata(py::module_& m) {
  py::class_<transfer_job>(m, "TransferJob",
                           "One load or store of a step (proto ConnectorMetadata).")
      .def_readonly("id", &transfer_job::id)
      .def_readonly("request_id", &transfer_job::request_id)
      .def_property_readonly("kind",
                             [](const transfer_job& j) { return std::string(to_string(j.kind)); })
      .def_readonly("slots", &transfer_job::slots)
      .def_readonly("gpu_blocks", &transfer_job::gpu_blocks)
      .def_readonly("skip", &transfer_job::skip)
      .def_property_readonly("group_sizes",
                             [](const transfer_job& j) {
                               return std::vector<uint32_t>(j.group_sizes.begin(),
                                                            j.group_sizes.end());
                             })
      .def_property_readonly("block_indices", [](const transfer_job& j) {
        return std::vector<uint32_t>(j.block_indices.begin(), j.block_indices.end());
      });
  py::class_<tier_job>(m, "TierJob",
                       "One job of the file tier (cascade, promotion, check; docs/disk_tier.md).")
      .def_readonly("id", &tier_job::id)
      .def_property_readonly("kind",
                             [](const tier_job& j) { return std::string(to_string(j.kind)); })
      .def_readonly("slots", &tier_job::slots)
      .def_property_readonly("keys", [](const tier_job& j) { return int_list(j.keys); });
  py::class_<connector_metadata>(m, "ConnectorMetadata", "What the workers get for one step.")
      .def_readonly("step", &connector_metadata::step)
      .def_readonly("loads", &connector_metadata::loads)
      .def_readonly("stores", &connector_metadata::stores)
      .def_readonly("flush", &connector_metadata::flush)
      .def_readonly("failed", &connector_metadata::failed)
      .def_readonly("flush_requests", &connector_metadata::flush_requests)
      .def_readonly("finished_requests", &connector_metadata::finished_requests)
      .def_readonly("tier_jobs", &connector_metadata::tier_jobs)
      .def_property_readonly("tier_removed", [](const connector_metadata& md) {
        return int_list(md.tier_removed);
      });
  bind_job_result<job_result>(m, "JobResult", "A job's outcome across every rank.");
  bind_job_result<rank_job_result>(m, "RankJobResult",
                                   "One rank's outcome of a job (WorkerConnector.get_finished).");
  py::class_<embed::connector_update>(m, "ConnectorUpdate",
                                      "What update_connector_output gathered.")
      .def_property_readonly(
          "finished_sending",
          [](const embed::connector_update& u) { return u.completions.finished_sending; })
      .def_property_readonly(
          "finished_recving",
          [](const embed::connector_update& u) { return u.completions.finished_recving; })
      .def_property_readonly(
          "invalid_block_ids",
          [](const embed::connector_update& u) { return u.completions.invalid_block_ids; })
      .def_readonly("jobs", &embed::connector_update::jobs)
      .def_readonly("through_step", &embed::connector_update::through_step);
}

}  // namespace

py::dict fault_counts_dict(const fault_counts& counts) {
  py::dict d;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] != 0) d[py::str(std::string{to_string(static_cast<fault_kind>(k))})] = counts[k];
  }
  return d;
}

void bind_scheduler(py::module_& m) {
  bind_metadata(m);
  py::class_<py_scheduler>(m, "SchedulerConnector",
                           "The scheduler side (embed::scheduler_connector): the planner, the "
                           "node's CPU pool, the coordinator. One thread calls it.")
      .def(py::init<const config_handle&, const std::optional<std::string>&,
                    const std::optional<std::string>&, bool, const std::string&, bool, bool>(),
           py::arg("config"), py::kw_only(), py::arg("instance") = py::none(),
           py::arg("token") = py::none(), py::arg("listen") = true, py::arg("transport") = "zmq",
           py::arg("create_or_attach") = false, py::arg("kv_events") = true)
      .def_property_readonly("host", [](py_scheduler& s) { return s.sc().config().network.host; })
      .def_property_readonly("port", [](py_scheduler& s) { return s.sc().port(); })
      .def_property_readonly("segment_name", [](py_scheduler& s) { return s.sc().segment_name(); })
      .def_property_readonly("metrics_port", [](py_scheduler& s) { return s.sc().metrics_port(); })
      .def_property_readonly("kv_events_endpoint",
                             [](py_scheduler& s) { return s.sc().kv_events_endpoint(); })
      .def_property_readonly("kv_events_replay_endpoint",
                             [](py_scheduler& s) { return s.sc().kv_events_replay_endpoint(); })
      .def_property_readonly("num_cpu_blocks",
                             [](py_scheduler& s) { return s.sc().config().pool.slots_per_rank; })
      .def("wait_for_workers", &py_scheduler::wait_for_workers, py::arg("timeout"))
      .def("get_num_new_matched_tokens", &py_scheduler::match, py::arg("req_id"),
           py::arg("block_hashes"), py::arg("num_tokens"), py::arg("num_computed"),
           py::arg("do_remote_decode") = false)
      .def("update_state_after_alloc", &py_scheduler::alloc, py::arg("req_id"),
           py::arg("block_hashes"), py::arg("num_tokens"), py::arg("block_ids"), py::arg("hashed"),
           py::arg("num_external"), py::arg("do_remote_decode") = false)
      .def("build_connector_meta", &py_scheduler::build, py::arg("step"), py::arg("new"),
           py::arg("cached"), py::arg("preempted"))
      .def("vllm_get_num_new_matched_tokens", &py_scheduler::vllm_match, py::arg("request"),
           py::arg("num_computed_tokens"),
           "get_num_new_matched_tokens of vLLM's Request (kvconnect.vllm).")
      .def("vllm_update_state_after_alloc", &py_scheduler::vllm_alloc, py::arg("request"),
           py::arg("blocks"), py::arg("num_external_tokens"),
           "update_state_after_alloc of vLLM's Request and KVCacheBlocks (kvconnect.vllm).")
      .def("vllm_build_connector_meta", &py_scheduler::build_vllm, py::arg("step"),
           py::arg("scheduler_output"), py::arg("requests") = py::none(),
           "build_connector_meta of vLLM's SchedulerOutput and the scheduled requests' Request "
           "objects, read in one call (kvconnect.vllm): from `requests`, {req_id: Request}, or "
           "when None the Request last passed to a vllm_* call for each id.")
      .def("vllm_update_connector_output", &py_scheduler::vllm_output, py::arg("connector_output"),
           "vLLM's KVConnectorOutput: its finished sets through apply_request_output, then "
           "update_connector_output's sets (None when empty) written back over them and its "
           "invalid block ids added (kvconnect.vllm).")
      .def("update_connector_output", &py_scheduler::output, py::arg("step") = py::none(),
           py::arg("timeout") = 0.0)
      .def("apply_request_output", &py_scheduler::request_output, py::arg("finished_sending"),
           py::arg("finished_recving"), py::arg("invalid_block_ids") = std::vector<gpu_block>{})
      .def("apply_job_results", &py_scheduler::job_results, py::arg("step"), py::arg("results"))
      .def("request_finished", &py_scheduler::finished, py::arg("req_id"))
      .def("take_events", &py_scheduler::events)
      .def("reset_cache", &py_scheduler::reset,
           "vLLM main's reset_cache, between steps: empties the CPU pool; the jobs in flight "
           "are flushed with the next step and end their requests' waits without reaching it.")
      .def("metrics_text", [](py_scheduler& s) { return s.sc().metrics_text(); })
      .def("stats", [](py_scheduler& s) { return stats_dict(s.sc().stats()); })
      .def(
          "fault_statistics",
          [](py_scheduler& s) { return fault_stats_dict(s.sc().fault_statistics()); },
          "Injected channel faults by kind, and what the coordinator dropped or failed.")
      .def("tables",
           [](py_scheduler& s) { return tables_dict(s.sc().tables(), s.cached_requests()); })
      .def_property_readonly("jobs_in_flight",
                             [](py_scheduler& s) { return s.sc().jobs_in_flight(); })
      .def("shutdown", &py_scheduler::shutdown, py::arg("timeout") = 5.0)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](py_scheduler& s, py::args) {
        s.shutdown(5.0);
        return false;
      });
}

}  // namespace kvc::python
