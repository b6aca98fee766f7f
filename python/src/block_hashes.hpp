#pragma once
/// Block hashes as Python engines pass them, as kvconnect's 128-bit block keys: `bytes` (vLLM's
/// BlockHash) give their last 16 bytes, big-endian (hi, lo; a shorter hash is zero-extended), an
/// `int` in [0, 2^128) its own value. The key goes back to Python as that int, so an 8-byte hash
/// h comes back as int.from_bytes(h, "big") (vLLM's integer form of a hash) and an int as itself.
///
/// request_keys keeps each request's keys between calls: a request's block_hashes only grow, so
/// a call converts only the hashes added since the last one. Requests live in a dense array of
/// entries found through an id map; as the planner does, each call first tries the entry that
/// followed the previous call's last time (an engine schedules its running requests in the same
/// order step after step), checked by its id, so that a steady step costs no map lookup. Not
/// thread-safe.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <pybind11/pybind11.h>

#include "proto/block_key.hpp"

namespace kvc::python {

/// The key of one hash; TypeError for another type, ValueError for an empty or negative hash
/// or an int of 2^128 or more.
block_key key_of(pybind11::handle hash);

/// The Python int of a key.
pybind11::object int_of(const block_key& key);

class request_keys {
 public:
  /// The keys of `hashes` (a list or tuple), converting only those beyond the ones seen for
  /// `id` before. Valid until the next call or forget().
  const std::vector<block_key>& keys(std::string_view id, pybind11::handle hashes);
  void forget(std::string_view id);
  size_t size() const noexcept { return index_.size(); }

 private:
  static constexpr uint32_t npos = UINT32_MAX;
  struct entry {
    std::string id;
    std::vector<block_key> keys;
    uint32_t next = npos;  ///< the entry asked for after this one last time (a hint)
    bool live = false;     ///< false: free, for a later request
  };
  /// The entry of `id`, created when there is none.
  uint32_t find_or_create(std::string_view id);

  /// Transparent: lookups by string_view allocate nothing.
  struct id_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, uint32_t, id_hash, std::equal_to<>> index_;
  std::vector<entry> entries_;
  std::vector<uint32_t> free_;
  uint32_t last_ = npos;  ///< the entry of the last call
};

}  // namespace kvc::python
