#include "proto/status.hpp"

namespace kvc {

std::string status::to_string() const {
  if (ok()) return "ok";
  std::string out{kvc::to_string(code_)};
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

}  // namespace kvc
