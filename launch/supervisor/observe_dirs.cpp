#include "launch/supervisor/observe_dirs.hpp"

#include "proto/private_files.hpp"

namespace kvc::launch {

status make_observe_dirs(const launch_config& c, uint32_t node) {
  const observe_section& o = c.observe;
  auto make = [](const char* key, const std::string& dir) {
    auto st = make_private_dir(dir);
    return st ? st : make_error(st.code(), std::string{key} + ": " + st.message());
  };
  if (o.trace != "off") {
    if (auto st = make("observe.trace_dir", o.trace_dir); !st) return st;
  }
  if (o.record && node == 0) {
    const bool own = !o.record_dir.empty();
    if (auto st = make(own ? "observe.record_dir" : "observe.trace_dir",
                       own ? o.record_dir : o.trace_dir);
        !st) {
      return st;
    }
  }
  return status::success();
}

}  // namespace kvc::launch
