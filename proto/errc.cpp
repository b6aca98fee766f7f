#include "proto/errc.hpp"

namespace kvc {

std::string_view to_string(errc e) noexcept {
  switch (e) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid_argument";
    case errc::not_found: return "not_found";
    case errc::not_ready: return "not_ready";
    case errc::precondition_failed: return "precondition_failed";
    case errc::capacity_exhausted: return "capacity_exhausted";
    case errc::unknown_policy: return "unknown_policy";
    case errc::device_unavailable: return "device_unavailable";
    case errc::device_error: return "device_error";
    case errc::shm_error: return "shm_error";
    case errc::layout_mismatch: return "layout_mismatch";
    case errc::protocol_mismatch: return "protocol_mismatch";
    case errc::timeout: return "timeout";
    case errc::io_error: return "io_error";
    case errc::injected_fault: return "injected_fault";
    case errc::internal: return "internal";
  }
  return "unknown_errc";
}

}  // namespace kvc
