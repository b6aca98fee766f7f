#pragma once
/// What Python passes to the scheduler side, read with the C API in one call each (no Python
/// loop, no per-item Python object built): a step's scheduled requests, as tuples
/// (SchedulerConnector.build_connector_meta) or as vLLM's SchedulerOutput and the Request objects
/// it names (vllm_build_connector_meta); and the other vLLM objects the scheduler role reads:
/// Request, KVCacheBlocks, KVConnectorOutput (the vllm_* calls kvconnect.vllm makes). Only the
/// fields vLLM's OffloadingConnectorScheduler reads are read (docs/python.md).
///
/// The ids are string_views into the Python strs; `held` keeps those strs alive, so they stay
/// valid while the caller releases the GIL. Block ids of all requests share one buffer.
/// Wrong types raise TypeError naming the field, out-of-range ints ValueError. Not thread-safe;
/// the GIL must be held while reading.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <pybind11/pybind11.h>

#include "actors/scheduler/planner.hpp"
#include "proto/block_key.hpp"
#include "proto/completion.hpp"
#include "proto/ids.hpp"
#include "python/src/request_cache.hpp"

namespace kvc::python {

/// The vLLM field names the binding reads and writes, interned once (the module's lifetime;
/// never freed): a name given as a C string is a new str per use.
struct vllm_names {
  PyObject* scheduled_new_reqs = PyUnicode_InternFromString("scheduled_new_reqs");
  PyObject* scheduled_cached_reqs = PyUnicode_InternFromString("scheduled_cached_reqs");
  PyObject* num_scheduled_tokens = PyUnicode_InternFromString("num_scheduled_tokens");
  PyObject* preempted_req_ids = PyUnicode_InternFromString("preempted_req_ids");
  PyObject* req_id = PyUnicode_InternFromString("req_id");
  PyObject* req_ids = PyUnicode_InternFromString("req_ids");
  PyObject* block_ids = PyUnicode_InternFromString("block_ids");
  PyObject* new_block_ids = PyUnicode_InternFromString("new_block_ids");
  PyObject* resumed_req_ids = PyUnicode_InternFromString("resumed_req_ids");
  PyObject* block_hashes = PyUnicode_InternFromString("block_hashes");
  PyObject* num_tokens = PyUnicode_InternFromString("num_tokens");
  PyObject* num_computed_tokens = PyUnicode_InternFromString("num_computed_tokens");
  PyObject* kv_transfer_params = PyUnicode_InternFromString("kv_transfer_params");
  PyObject* do_remote_decode = PyUnicode_InternFromString("do_remote_decode");
  PyObject* request_id = PyUnicode_InternFromString("request_id");
  PyObject* blocks = PyUnicode_InternFromString("blocks");
  PyObject* block_id = PyUnicode_InternFromString("block_id");
  PyObject* block_hash = PyUnicode_InternFromString("block_hash");
  PyObject* finished_sending = PyUnicode_InternFromString("finished_sending");
  PyObject* finished_recving = PyUnicode_InternFromString("finished_recving");
  PyObject* invalid_block_ids = PyUnicode_InternFromString("invalid_block_ids");
};

/// The names, made on first use (the GIL held).
const vllm_names& vllm_field_names();

/// vLLM's Request for get_num_new_matched_tokens and update_state_after_alloc: the index of its
/// entry in `cache`, which holds the Request object, its block_hashes list and its
/// kv_transfer_params["do_remote_decode"] (request_cache::entry). Those two fields are read only
/// when the entry holds another Request object or none: vLLM sets both once, in Request's
/// constructor, and only extends the list in place. The entry is found without reading
/// `request_id` when it is the last lookup's and holds this very object (vLLM calls
/// update_state_after_alloc right after get_num_new_matched_tokens for the same Request), else
/// by `request_id`. Nothing changes in `cache` when a field is of a wrong type.
uint32_t read_vllm_request(pybind11::handle request, request_cache& cache);
/// Request.num_tokens (read on every call: it grows as the request decodes).
uint32_t read_vllm_num_tokens(pybind11::handle request);

/// vLLM's KVCacheBlocks of the one KV-cache group kvconnect serves, as far as R1's
/// update_state_after_alloc reads them for a load into the first `num_gpu_blocks` blocks (all
/// of them when there are fewer: the planner then refuses the table): `block_hash` from the
/// start up to the first block that is neither the null block (id 0) nor hashed, the first one
/// a load fills, and `block_id` of each block without a hash up to there and of every block from
/// there to `num_gpu_blocks`. A hashed block's id is not read: it is given as 0 (hashed 1), which
/// the planner skips as it skips a hashed block; past the first block to fill the flags are 0.
/// No block past `num_gpu_blocks` is read. The vectors are cleared first.
void read_vllm_blocks(pybind11::handle blocks, size_t num_gpu_blocks, std::vector<gpu_block>& ids,
                      std::vector<uint8_t>& hashed);

/// A KVConnectorOutput's finished_sending / finished_recving (None, or an iterable of strs)
/// as string_views into strs that `held` keeps alive.
void read_vllm_finished(pybind11::handle connector_output, std::vector<std::string_view>& sending,
                        std::vector<std::string_view>& recving,
                        std::vector<pybind11::object>& held);

/// Job results as (job id, "load" or "store", ok) tuples (apply_job_results), appended to
/// `out`; a failed one as errc::device_error, "reported failed by the engine".
void read_job_results(pybind11::handle results, std::vector<job_result>& out);

struct step_requests {
  /// The scheduled requests as the planner takes them (the new ones first), read straight into
  /// this one array: a step writes no second copy of them. Their block ids point into `blocks`,
  /// bound once the whole step is read (the buffer may grow while it is read).
  std::vector<scheduler::scheduled_request> requests;
  size_t num_new = 0;
  std::vector<gpu_block> blocks;
  std::vector<std::string_view> preempted;
  std::vector<pybind11::object> held;

  /// `fresh` and `cached`: lists of 8-tuples (req_id, block_hashes, num_tokens, num_computed,
  /// num_scheduled, block_ids or None, resumed, do_remote_decode); `preempted`: strs. The keys
  /// come from `cache`.
  void read_tuples(pybind11::handle fresh, pybind11::handle cached, pybind11::handle preempted,
                   request_cache& cache);

  /// vLLM's SchedulerOutput (scheduled_new_reqs: req_id, block_ids, num_computed_tokens;
  /// scheduled_cached_reqs: req_ids, resumed_req_ids, new_block_ids, num_computed_tokens;
  /// num_scheduled_tokens; preempted_req_ids) and the Request of each scheduled request
  /// (request_id, block_hashes, num_tokens, kv_transfer_params): from `requests`, a dict
  /// {req_id: Request}, or, when it is None, the Request last passed to
  /// vllm_get_num_new_matched_tokens or vllm_update_state_after_alloc for the id (kept in
  /// `cache` until request_finished). A scheduled id missing there raises KeyError. A Request's
  /// block_hashes and kv_transfer_params are read once per Request object and kept in `cache`
  /// (request_cache.hpp); its num_tokens only when a request is new or resumed, or when
  /// computed + scheduled tokens may complete an offloaded block of `offloaded_block_size`
  /// tokens past the count read last time (the planner reads nothing else of it).
  void read_vllm(pybind11::handle scheduler_output, pybind11::handle requests,
                 request_cache& cache, uint32_t offloaded_block_size);

 private:
  /// Where the block ids of requests[request] lie in `blocks` until bind_blocks().
  struct block_range {
    uint32_t request;
    uint32_t at;
    uint32_t count;
  };

  void clear();
  std::string_view hold_id(pybind11::handle id, const char* what);
  /// Appends a list or tuple of block ids (None: none) to `blocks`, as those of
  /// requests[request] (the request about to be appended).
  void add_blocks(size_t request, pybind11::handle ids, const char* what);
  /// Points each request's block_ids at its range of `blocks`, now that no more are appended.
  void bind_blocks();

  std::vector<block_range> ranges_;  // of the requests with block ids, in order
};

}  // namespace kvc::python
