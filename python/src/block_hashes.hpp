#pragma once
/// Block hashes as Python engines pass them, as kvconnect's 128-bit block keys: `bytes` (vLLM's
/// BlockHash) give their last 16 bytes, big-endian (hi, lo; a shorter hash is zero-extended), an
/// `int` in [0, 2^128) its own value. The key goes back to Python as that int, so an 8-byte hash
/// h comes back as int.from_bytes(h, "big") (vLLM's integer form of a hash) and an int as itself.
#include <pybind11/pybind11.h>

#include <span>

#include "proto/block_key.hpp"

namespace kvc::python {

/// The key of one hash; TypeError for another type, ValueError for an empty or negative hash
/// or an int of 2^128 or more.
block_key key_of(pybind11::handle hash);

/// The Python int of a key.
pybind11::object int_of(const block_key& key);

/// The Python ints of keys, in order.
pybind11::list int_list(std::span<const block_key> keys);

}  // namespace kvc::python
