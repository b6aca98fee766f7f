#pragma once
/// request_cache: what the binding keeps of each request between calls, so that a step reads
/// only what changed. A request's block_hashes only grow, so each call converts only the hashes
/// added since the last one into `keys`. For vLLM's Request objects it also keeps the object
/// itself, its block_hashes list and its kv_transfer_params' do_remote_decode, read once per
/// Request object: vLLM creates a Request's block_hashes list once and only extends it in place
/// (vllm/v1/request.py), so a step reads that list's length, not the attribute. And the
/// num_computed of its last get_num_new_matched_tokens, which tells update_state_after_alloc
/// how many of vLLM's blocks a load reads. A request's entry lives until forget()
/// (request_finished); it holds a reference to the objects.
///
/// Requests live in a dense array of entries found through an id map; as the planner does, each
/// lookup first tries the entry that followed the previous lookup's entry last time (an engine
/// schedules its running requests in the same order step after step), checked by its id, so a
/// steady step costs no map lookup. An id passed as a str object is checked by identity first:
/// vLLM passes a request's one `request_id` str every step, so the entry keeps the first str
/// object it saw for its id (until forget) and a steady step compares no text. Not thread-safe;
/// the GIL must be held.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <pybind11/pybind11.h>

#include "proto/block_key.hpp"

namespace kvc::python {

class request_cache {
 public:
  static constexpr uint32_t npos = UINT32_MAX;

  /// What a step reads of each scheduled request fills its first cache line (and `keys` the
  /// second): the guess check, the id's str and text, the Request's identity, its list.
  struct alignas(64) entry {
    uint32_t next = npos;         ///< the entry looked up after this one last time (a hint)
    uint32_t num_computed = 0;    ///< of the last get_num_new_matched_tokens (as the planner's)
    bool live = false;            ///< false: free, for a later request
    bool remote_decode = false;   ///< the Request's kv_transfer_params["do_remote_decode"]
    uint32_t tokens_known = 0;    ///< Request.num_tokens when last read (read_vllm)
    /// The first token count past tokens_known's offloaded block (saturated); 0: none read.
    uint32_t tokens_block_end = 0;
    pybind11::object id_object;   ///< the first str seen for this id; empty until one is
    std::string_view id_text;     ///< id_object's UTF-8 (valid while id_object lives)
    pybind11::object request;     ///< vLLM's Request last seen for this id; empty on the tuples
    pybind11::object hashes;      ///< that Request's block_hashes
    std::vector<block_key> keys;  ///< of the block hashes seen so far
    std::string id;
  };

  /// The entry of `id`, created when there is none. Entries may move when one is created.
  uint32_t find_or_create(std::string_view id);
  /// The same for the str `id` (TypeError naming `what` for another type); `text` is set to its
  /// text, valid while `id` lives.
  uint32_t find_or_create(pybind11::handle id, std::string_view& text, const char* what);
  /// The entry of the str `id`, npos when there is none; `text` as find_or_create sets it.
  uint32_t find(pybind11::handle id, std::string_view& text, const char* what);
  /// A new entry for the str `id` of text `text`, which find() did not find.
  uint32_t create(pybind11::handle id, std::string_view text);
  /// The last lookup's entry when it holds the Request object `request` (identity), else npos;
  /// changes no hint.
  uint32_t last_holding(pybind11::handle request) const noexcept {
    return last_ != npos && entries_[last_].request.ptr() == request.ptr() ? last_ : npos;
  }
  entry& at(uint32_t index) noexcept { return entries_[index]; }
  /// The entry now holds `request`, a Request object not seen for it before, with its
  /// block_hashes list and do_remote_decode; the num_tokens read of another object is dropped.
  void adopt(uint32_t index, pybind11::handle request, pybind11::object hashes,
             bool remote_decode);

  /// The keys of `hashes` (a list or tuple) for the entry, converting only those beyond the
  /// ones seen before (all of them when the list is shorter than that: another list). Valid
  /// until the next call for the same entry or forget().
  const std::vector<block_key>& keys(uint32_t index, pybind11::handle hashes) {
    // Inlined: a list as long as the keys seen is the usual case of a running request.
    std::vector<block_key>& seen = entries_[index].keys;
    PyObject* h = hashes.ptr();
    if (PyList_CheckExact(h) && static_cast<size_t>(PyList_GET_SIZE(h)) == seen.size()) {
      return seen;
    }
    return convert_keys(index, hashes);
  }

  void forget(std::string_view id);
  size_t size() const noexcept { return index_.size(); }

 private:
  /// keys() of a list that is not the one seen, or longer.
  const std::vector<block_key>& convert_keys(uint32_t index, pybind11::handle hashes);
  /// Transparent: lookups by string_view allocate nothing.
  struct id_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  /// The entry that followed the last lookup's last time, if it is live; npos otherwise.
  uint32_t guess() const noexcept;
  /// Records `found` as the entry after the last lookup's, and as the last lookup's.
  void follow(uint32_t found) noexcept;

  std::unordered_map<std::string, uint32_t, id_hash, std::equal_to<>> index_;
  std::vector<entry> entries_;
  std::vector<uint32_t> free_;
  uint32_t last_ = npos;  ///< the entry of the last lookup
};

}  // namespace kvc::python
