#include "python/src/step_requests.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "python/src/errors.hpp"

namespace kvc::python {
namespace py = pybind11;

namespace {

/// u32_of's every case but the one-digit int.
[[gnu::noinline]] uint32_t u32_of_any(PyObject* o, const char* what) {
  if (!PyLong_Check(o)) wrong_type(what, "an int", o);
  const unsigned long v = PyLong_AsUnsignedLong(o);
  if ((v == static_cast<unsigned long>(-1) && PyErr_Occurred()) ||
      v > std::numeric_limits<uint32_t>::max()) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " must be in [0, 2**32)");
  }
  return static_cast<uint32_t>(v);
}

/// An int in [0, 2**32); TypeError naming `what` for another type, ValueError out of range.
/// Inlined: a step reads two or three per scheduled request.
[[gnu::always_inline]] inline uint32_t u32_of(PyObject* o, const char* what) {
#if PY_VERSION_HEX < 0x030C0000
  // Before 3.12 an int below 2**30 has one 30-bit digit (ob_size 1), 0 none: read it directly
  // (token counts, block ids; PyLong_AsUnsignedLong costs a call and its checks per field).
  if (PyLong_CheckExact(o)) {
    const Py_ssize_t digits = Py_SIZE(o);
    if (digits == 1) return static_cast<uint32_t>(reinterpret_cast<PyLongObject*>(o)->ob_digit[0]);
    if (digits == 0) return 0;
  }
#endif
  return u32_of_any(o, what);
}

bool truth_of(PyObject* o) {
  const int t = PyObject_IsTrue(o);
  if (t < 0) throw py::error_already_set();
  return t == 1;
}

/// A new reference to `o.name` (name an interned str); AttributeError as it is.
py::object attr(py::handle o, PyObject* name) {
  PyObject* v = PyObject_GetAttr(o.ptr(), name);
  if (v == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(v);
}

/// A list or tuple's items (borrowed) and size; TypeError for anything else.
struct items {
  PyObject** at;
  Py_ssize_t size;
};
items items_of(py::handle seq, const char* what) {
  if (!PyList_Check(seq.ptr()) && !PyTuple_Check(seq.ptr())) {
    wrong_type(what, "a list or tuple", seq.ptr());
  }
  return {PySequence_Fast_ITEMS(seq.ptr()), PySequence_Fast_GET_SIZE(seq.ptr())};
}

/// Request.kv_transfer_params.get("do_remote_decode") (vLLM's P/D prefill instance).
bool remote_decode_of(py::handle request) {
  const vllm_names& n = vllm_field_names();
  const py::object params = attr(request, n.kv_transfer_params);
  if (params.is_none()) return false;
  if (!PyDict_Check(params.ptr())) {
    wrong_type("Request.kv_transfer_params", "a dict or None", params.ptr());
  }
  PyObject* flag = PyDict_GetItemWithError(params.ptr(), n.do_remote_decode);
  if (flag == nullptr && PyErr_Occurred()) throw py::error_already_set();
  return flag != nullptr && truth_of(flag);
}

/// Appends the strs of `ids` (None, or any iterable) to `out`, kept alive by `held`.
void add_texts(py::handle ids, const char* what, std::vector<std::string_view>& out,
               std::vector<py::object>& held) {
  if (ids.is_none()) return;
  const py::object it = py::reinterpret_steal<py::object>(PyObject_GetIter(ids.ptr()));
  if (!it) throw py::error_already_set();
  while (PyObject* id = PyIter_Next(it.ptr())) {
    held.push_back(py::reinterpret_steal<py::object>(id));
    out.push_back(text_of(held.back(), what));
  }
  if (PyErr_Occurred()) throw py::error_already_set();
}

}  // namespace

const vllm_names& vllm_field_names() {
  static const vllm_names* n = new vllm_names;  // built under the GIL on first use
  return *n;
}

uint32_t read_vllm_request(py::handle request, request_cache& cache) {
  uint32_t at = cache.last_holding(request);
  if (at != request_cache::npos) return at;
  const vllm_names& n = vllm_field_names();
  const py::object id = attr(request, n.request_id);
  std::string_view text;
  at = cache.find(id, text, "Request.request_id");
  if (at != request_cache::npos && cache.at(at).request.ptr() == request.ptr()) return at;
  py::object hashes = attr(request, n.block_hashes);  // a Request object not seen before
  const bool remote = remote_decode_of(request);
  if (at == request_cache::npos) at = cache.create(id, text);
  cache.adopt(at, request, std::move(hashes), remote);
  return at;
}

uint32_t read_vllm_num_tokens(py::handle request) {
  return u32_of(attr(request, vllm_field_names().num_tokens).ptr(), "Request.num_tokens");
}

void read_vllm_blocks(py::handle blocks, size_t num_gpu_blocks, std::vector<gpu_block>& ids,
                      std::vector<uint8_t>& hashed) {
  const vllm_names& n = vllm_field_names();
  ids.clear();
  hashed.clear();
  const py::object groups_obj = attr(blocks, n.blocks);
  const items groups = items_of(groups_obj, "KVCacheBlocks.blocks");
  if (groups.size != 1) {
    throw py::value_error("KVCacheBlocks.blocks must hold one KV-cache group, not " +
                          std::to_string(groups.size));
  }
  const items group = items_of(groups.at[0], "KVCacheBlocks.blocks[0]");
  const size_t count = std::min(num_gpu_blocks, static_cast<size_t>(group.size));
  ids.resize(count);
  hashed.resize(count);
  auto id_of = [&](size_t i) {
    return u32_of(attr(group.at[i], n.block_id).ptr(), "KVCacheBlock.block_id");
  };
  size_t i = 0;
  while (i < count) {  // through the first block to fill
    if (!attr(group.at[i], n.block_hash).is_none()) {
      hashed[i++] = 1;  // its id stays 0: not read
      continue;
    }
    ids[i] = id_of(i);
    if (ids[i++] != 0) break;
  }
  for (; i < count; ++i) ids[i] = id_of(i);
}

void read_vllm_finished(py::handle out, std::vector<std::string_view>& sending,
                        std::vector<std::string_view>& recving, std::vector<py::object>& held) {
  const vllm_names& n = vllm_field_names();
  sending.clear();
  recving.clear();
  add_texts(attr(out, n.finished_sending), "finished_sending", sending, held);
  add_texts(attr(out, n.finished_recving), "finished_recving", recving, held);
}

void read_job_results(py::handle results, std::vector<job_result>& out) {
  const py::object seq =
      py::reinterpret_steal<py::object>(PySequence_Fast(results.ptr(), "results must be a list"));
  if (!seq) throw py::error_already_set();
  const items all = items_of(seq, "results");
  for (Py_ssize_t i = 0; i < all.size; ++i) {
    const items t = items_of(all.at[i], "a job result");
    if (t.size != 3) type_error("a job result is a 3-tuple (job id, \"load\" or \"store\", ok)");
    job_result r;
    PyObject* id = t.at[0];
    if (!PyLong_Check(id)) wrong_type("a job id", "an int", id);
    r.job = PyLong_AsUnsignedLongLong(id);
    if (r.job == static_cast<job_id>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error("a job id must be in [0, 2**64)");
    }
    const std::string_view kind = text_of(t.at[1], "a job kind");
    if (kind == "load") {
      r.kind = transfer_kind::load;
    } else if (kind == "store") {
      r.kind = transfer_kind::store;
    } else {
      const bool tier = kind == "cascade" || kind == "promotion" || kind == "check";
      throw py::value_error("a job kind is \"load\" or \"store\", not \"" + std::string(kind) +
                            "\"" +
                            (tier ? " (the file tier's jobs are reported by kvconnect's workers "
                                    "on the step channel)"
                                  : ""));
    }
    r.ok = truth_of(t.at[2]);
    if (!r.ok) {
      r.error = errc::device_error;
      r.detail = "reported failed by the engine";
    }
    out.push_back(std::move(r));
  }
}

void step_requests::clear() {
  requests.clear();
  num_new = 0;
  blocks.clear();
  ranges_.clear();
  preempted.clear();
  held.clear();
}

std::string_view step_requests::hold_id(py::handle id, const char* what) {
  const std::string_view text = text_of(id, what);
  held.push_back(py::reinterpret_borrow<py::object>(id));
  return text;
}

void step_requests::add_blocks(size_t request, py::handle ids, const char* what) {
  if (ids.is_none()) return;
  const size_t at = blocks.size();
  const items list = items_of(ids, what);
  for (Py_ssize_t i = 0; i < list.size; ++i) blocks.push_back(u32_of(list.at[i], what));
  if (blocks.size() > at) {
    ranges_.push_back({static_cast<uint32_t>(request), static_cast<uint32_t>(at),
                       static_cast<uint32_t>(blocks.size() - at)});
  }
}

void step_requests::bind_blocks() {
  for (const block_range& r : ranges_) requests[r.request].block_ids = {&blocks[r.at], r.count};
}

void step_requests::read_tuples(py::handle fresh, py::handle cached, py::handle preempted_ids,
                                request_cache& cache) {
  clear();
  for (py::handle list : {fresh, cached}) {
    const items all = items_of(list, "new and cached");
    for (Py_ssize_t k = 0; k < all.size; ++k) {
      PyObject* t = all.at[k];
      if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 8) {
        type_error(
            "a scheduled request is an 8-tuple (req_id, block_hashes, num_tokens, "
            "num_computed, num_scheduled, block_ids, resumed, do_remote_decode)");
      }
      scheduler::scheduled_request r;
      r.req.id = hold_id(PyTuple_GET_ITEM(t, 0), "req_id");
      r.req.num_tokens = u32_of(PyTuple_GET_ITEM(t, 2), "num_tokens");
      r.num_computed = u32_of(PyTuple_GET_ITEM(t, 3), "num_computed");
      r.num_scheduled = u32_of(PyTuple_GET_ITEM(t, 4), "num_scheduled");
      add_blocks(requests.size(), PyTuple_GET_ITEM(t, 5), "block_ids");
      r.resumed = truth_of(PyTuple_GET_ITEM(t, 6));
      r.req.do_remote_decode = truth_of(PyTuple_GET_ITEM(t, 7));
      r.req.block_hashes = cache.keys(cache.find_or_create(r.req.id), PyTuple_GET_ITEM(t, 1));
      requests.push_back(r);
    }
    if (list.ptr() == fresh.ptr()) num_new = requests.size();
  }
  const items pre = items_of(preempted_ids, "preempted");
  for (Py_ssize_t i = 0; i < pre.size; ++i) preempted.push_back(hold_id(pre.at[i], "preempted"));
  bind_blocks();
}

void step_requests::read_vllm(py::handle out, py::handle requests_by_id, request_cache& cache,
                              uint32_t offloaded_block_size) {
  clear();
  const vllm_names& n = vllm_field_names();
  const bool by_dict = !requests_by_id.is_none();
  if (by_dict && !PyDict_Check(requests_by_id.ptr())) {
    wrong_type("requests", "a dict or None", requests_by_id.ptr());
  }
  const py::object scheduled = attr(out, n.num_scheduled_tokens);
  if (!PyDict_Check(scheduled.ptr())) {
    wrong_type("num_scheduled_tokens", "a dict", scheduled.ptr());
  }
  const uint64_t obs = offloaded_block_size;
  // One scheduled request: its id, its block ids, its num_computed_tokens as the SchedulerOutput
  // gives it (Request.num_computed_tokens while vLLM builds the metadata: vLLM advances it
  // after build_connector_meta), whether it is new, whether it resumed, and
  // num_scheduled_tokens[id] (`tokens`, when the caller found it already, held: reading the
  // Request may run Python code; else looked up here).
  auto add = [&](py::handle id, py::handle block_ids, PyObject* computed, bool is_new,
                 bool resumed, py::object tokens) {
    scheduler::scheduled_request f;
    uint32_t at = request_cache::npos;
    PyObject* req = nullptr;
    if (by_dict) {
      f.req.id = text_of(id, "req_id");
      req = PyDict_GetItemWithError(requests_by_id.ptr(), id.ptr());
      if (req == nullptr && PyErr_Occurred()) throw py::error_already_set();
    } else {
      at = cache.find(id, f.req.id, "req_id");
      if (at != request_cache::npos) req = cache.at(at).request.ptr();
    }
    if (req == nullptr) {
      throw py::key_error("request " + std::string(f.req.id) +
                          " is scheduled but was never passed to get_num_new_matched_tokens");
    }
    // f.req.id's str, while unlocked: the entry holds the one it found by identity.
    if (by_dict || cache.at(at).id_object.ptr() != id.ptr()) {
      held.push_back(py::reinterpret_borrow<py::object>(id));
    }
    if (!tokens) {
      PyObject* t = PyDict_GetItemWithError(scheduled.ptr(), id.ptr());
      if (t == nullptr) {
        if (PyErr_Occurred()) throw py::error_already_set();
        throw py::key_error("num_scheduled_tokens has no entry for request " + std::string(f.req.id));
      }
      tokens = py::reinterpret_borrow<py::object>(t);
    }
    f.num_scheduled = u32_of(tokens.ptr(), "num_scheduled_tokens[req_id]");
    f.num_computed = u32_of(computed, "num_computed_tokens");
    const py::handle r(req);
    if (by_dict) at = cache.find_or_create(id, f.req.id, "req_id");
    request_cache::entry& e = cache.at(at);
    if (e.request.ptr() != req) {  // a Request object not seen before
      py::object hashes = attr(r, n.block_hashes);
      cache.adopt(at, r, std::move(hashes), remote_decode_of(r));
    }
    const bool read_tokens = is_new || resumed;
    f.req.block_hashes = cache.keys(at, e.hashes);
    f.req.do_remote_decode = e.remote_decode;
    // The planner reads num_tokens only through min(computed + scheduled, num_tokens) / obs,
    // the request's complete offloadable blocks (planner_steps.cpp). Request.num_tokens (a
    // property in vLLM) only grows while the request runs, so the count read last time gives
    // that quotient whenever computed + scheduled is not above it, or is in the same offloaded
    // block, i.e. is below the end of that count's block: it is read again only when a block
    // may have completed, and for a new or resumed request (docs/python.md).
    const uint64_t after = uint64_t{f.num_computed} + f.num_scheduled;
    if (!read_tokens && after < e.tokens_block_end) {
      f.req.num_tokens = e.tokens_known;
    } else {
      f.req.num_tokens = u32_of(attr(r, n.num_tokens).ptr(), "Request.num_tokens");
      e.tokens_known = f.req.num_tokens;
      e.tokens_block_end = static_cast<uint32_t>(
          std::min<uint64_t>((f.req.num_tokens / obs + 1) * obs, UINT32_MAX));
    }
    // vLLM's block ids are per KV-cache group; kvconnect serves one group (load_config).
    if (!block_ids.is_none()) {
      const items groups = items_of(block_ids, "block_ids");
      if (groups.size < 1) type_error("block_ids must hold the ids of one KV-cache group");
      block_ids = groups.at[0];
    }
    // None: a running request's usual step, no new block.
    if (!block_ids.is_none()) add_blocks(requests.size(), block_ids, "block_ids");
    f.resumed = resumed;
    requests.push_back(f);
  };

  const py::object fresh = attr(out, n.scheduled_new_reqs);
  const items news = items_of(fresh, "scheduled_new_reqs");
  for (Py_ssize_t i = 0; i < news.size; ++i) {
    const py::handle r(news.at[i]);
    const py::object computed = attr(r, n.num_computed_tokens);
    add(attr(r, n.req_id), attr(r, n.block_ids), computed.ptr(), true, false, py::object());
  }
  num_new = requests.size();

  const py::object cached = attr(out, n.scheduled_cached_reqs);
  const py::object ids_obj = attr(cached, n.req_ids);
  const py::object new_blocks_obj = attr(cached, n.new_block_ids);
  const py::object computed_obj = attr(cached, n.num_computed_tokens);
  const py::object resumed_ids = attr(cached, n.resumed_req_ids);
  const items ids = items_of(ids_obj, "scheduled_cached_reqs.req_ids");
  const items new_blocks = items_of(new_blocks_obj, "scheduled_cached_reqs.new_block_ids");
  const items computed = items_of(computed_obj, "scheduled_cached_reqs.num_computed_tokens");
  if (new_blocks.size != ids.size || computed.size != ids.size) {
    throw py::value_error(
        "scheduled_cached_reqs: req_ids, new_block_ids and num_computed_tokens differ in length");
  }
  const bool any_resumed = !resumed_ids.is_none() && PyObject_Length(resumed_ids.ptr()) != 0;
  if (PyErr_Occurred()) throw py::error_already_set();
  // vLLM's scheduler fills num_scheduled_tokens with the running requests first, in the order
  // of scheduled_cached_reqs: walk it beside req_ids while its keys are the same strs, and look
  // up from the first one that is not.
  Py_ssize_t pos = 0;
  bool in_order = true;
  for (Py_ssize_t i = 0; i < ids.size; ++i) {
    bool resumed = false;
    if (any_resumed) {
      const int in = PySequence_Contains(resumed_ids.ptr(), ids.at[i]);
      if (in < 0) throw py::error_already_set();
      resumed = in == 1;
    }
    PyObject* key = nullptr;
    PyObject* tokens = nullptr;
    in_order = in_order && PyDict_Next(scheduled.ptr(), &pos, &key, &tokens) && key == ids.at[i];
    add(ids.at[i], new_blocks.at[i], computed.at[i], false, resumed,
        in_order ? py::reinterpret_borrow<py::object>(tokens) : py::object());
  }

  add_texts(attr(out, n.preempted_req_ids), "preempted_req_ids", preempted, held);
  bind_blocks();
}

}  // namespace kvc::python
