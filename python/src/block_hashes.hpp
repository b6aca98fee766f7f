#pragma once
/// Block hashes as Python engines pass them, as kvconnect's 128-bit block keys: `bytes` (vLLM's
/// BlockHash) give their last 16 bytes, big-endian (hi, lo; a shorter hash is zero-extended), an
/// `int` in [0, 2^128) its own value. The key goes back to Python as that int, so an 8-byte hash
/// h comes back as int.from_bytes(h, "big") (vLLM's integer form of a hash) and an int as itself.
///
/// request_keys keeps each request's keys between calls: a request's block_hashes only grow, so
/// a call converts only the hashes added since the last one. Not thread-safe.
#include <string>
#include <functional>
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
  /// `id` before. Valid until the next call for the same id or forget(id).
  const std::vector<block_key>& keys(std::string_view id, pybind11::handle hashes);
  void forget(std::string_view id);
  size_t size() const noexcept { return keys_.size(); }

 private:
  /// Transparent: lookups by string_view allocate nothing.
  struct id_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  std::unordered_map<std::string, std::vector<block_key>, id_hash, std::equal_to<>> keys_;
};

}  // namespace kvc::python
