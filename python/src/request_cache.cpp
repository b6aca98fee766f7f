#include "python/src/request_cache.hpp"

#include "python/src/block_hashes.hpp"
#include "python/src/errors.hpp"

namespace kvc::python {
namespace py = pybind11;

uint32_t request_cache::guess() const noexcept {
  if (last_ == npos) return npos;
  const uint32_t g = entries_[last_].next;
  return g != npos && entries_[g].live ? g : npos;
}

void request_cache::follow(uint32_t found) noexcept {
  if (last_ != npos) entries_[last_].next = found;
  last_ = found;
}

uint32_t request_cache::find(py::handle id, std::string_view& text, const char* what) {
  const uint32_t g = guess();
  if (g != npos && entries_[g].id_object.ptr() == id.ptr()) {  // the str of last step
    text = entries_[g].id_text;
    follow(g);
    return g;
  }
  text = text_of(id, what);
  uint32_t found = npos;
  if (g != npos && entries_[g].id == text) {
    found = g;
  } else {
    const auto it = index_.find(text);
    if (it == index_.end()) return npos;
    found = it->second;
  }
  entry& e = entries_[found];
  if (!e.id_object) {
    e.id_object = py::reinterpret_borrow<py::object>(id);
    e.id_text = text;
  }
  follow(found);
  return found;
}

uint32_t request_cache::find_or_create(py::handle id, std::string_view& text, const char* what) {
  const uint32_t found = find(id, text, what);
  return found != npos ? found : create(id, text);
}

uint32_t request_cache::create(py::handle id, std::string_view text) {
  const uint32_t made = find_or_create(text);
  entry& e = entries_[made];
  e.id_object = py::reinterpret_borrow<py::object>(id);
  e.id_text = text;
  return made;
}

uint32_t request_cache::find_or_create(std::string_view id) {
  uint32_t found = guess();
  if (found != npos && entries_[found].id != id) found = npos;
  if (found == npos) {
    auto [it, fresh] = index_.try_emplace(std::string(id), npos);
    if (fresh) {
      if (free_.empty()) {
        it->second = static_cast<uint32_t>(entries_.size());
        entries_.emplace_back();
      } else {
        it->second = free_.back();
        free_.pop_back();
      }
      entry& e = entries_[it->second];
      e.id.assign(id);
      e.live = true;
    }
    found = it->second;
  }
  follow(found);
  return found;
}

const std::vector<block_key>& request_cache::convert_keys(uint32_t index, py::handle hashes) {
  if (!PyList_Check(hashes.ptr()) && !PyTuple_Check(hashes.ptr())) {
    type_error("block_hashes must be a list or tuple, got " +
               std::string(py::str(py::type::handle_of(hashes).attr("__name__"))));
  }
  std::vector<block_key>& out = entries_[index].keys;
  const auto n = static_cast<size_t>(PySequence_Fast_GET_SIZE(hashes.ptr()));
  if (n < out.size()) out.clear();  // not the same request's list: convert it anew
  PyObject** items = PySequence_Fast_ITEMS(hashes.ptr());
  if (out.empty()) out.reserve(n);
  for (size_t i = out.size(); i < n; ++i) out.push_back(key_of(items[i]));
  return out;
}

void request_cache::adopt(uint32_t index, py::handle request, py::object hashes,
                          bool remote_decode) {
  entry& e = entries_[index];
  e.request = py::reinterpret_borrow<py::object>(request);
  e.hashes = std::move(hashes);
  e.remote_decode = remote_decode;
  e.tokens_block_end = 0;
}

void request_cache::forget(std::string_view id) {
  auto it = index_.find(id);
  if (it == index_.end()) return;
  const uint32_t at = it->second;
  index_.erase(it);
  entry& e = entries_[at];
  e.id.clear();
  e.id_object = py::object();
  e.id_text = {};
  e.keys.clear();
  e.request = py::object();
  e.hashes = py::object();
  e.remote_decode = false;
  e.tokens_block_end = 0;
  e.num_computed = 0;
  e.next = npos;
  e.live = false;
  free_.push_back(at);
}

}  // namespace kvc::python
