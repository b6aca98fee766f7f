#include "actors/control/error_bridge.hpp"

#include <string>

#include <caf/exit_reason.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace kvc::control {

namespace {

/// The single string a kvc error carries, or the context rendered by CAF.
std::string context_text(const caf::message& ctx) {
  if (ctx.empty()) return {};
  if (ctx.match_elements<std::string>()) return ctx.get_as<std::string>(0);
  return to_string(ctx);
}

errc from_sec(caf::sec s) {
  switch (s) {
    case caf::sec::request_timeout:
    case caf::sec::connection_timeout:
      return errc::timeout;
    case caf::sec::request_receiver_down:
    case caf::sec::no_actor_published_at_port:
    case caf::sec::disconnect_during_handshake:
    case caf::sec::no_route_to_receiving_node:
    case caf::sec::cannot_connect_to_node:
    case caf::sec::cannot_open_port:
    case caf::sec::network_syscall_failed:
    case caf::sec::remote_linking_failed:
    case caf::sec::socket_invalid:
    case caf::sec::socket_disconnected:
    case caf::sec::socket_operation_failed:
    case caf::sec::remote_lookup_failed:
      return errc::io_error;
    case caf::sec::unexpected_actor_messaging_interface:
    case caf::sec::incompatible_versions:
    case caf::sec::incompatible_application_ids:
    case caf::sec::malformed_basp_message:
    case caf::sec::unknown_type:
      return errc::protocol_mismatch;
    case caf::sec::unexpected_message:
    case caf::sec::unexpected_response:
    case caf::sec::invalid_argument:
      return errc::invalid_argument;
    default:
      return errc::internal;
  }
}

std::string with_context(std::string text, const caf::message& ctx) {
  if (auto c = context_text(ctx); !c.empty()) {
    text += " (";
    text += c;
    text += ")";
  }
  return text;
}

}  // namespace

caf::error to_caf_error(const status& s) {
  if (s.ok()) return caf::none;
  return caf::make_error(s.code(), s.message());
}

status to_status(const caf::error& e) {
  if (!e) return status::success();
  if (e.category() == error_category) {
    auto code = static_cast<errc>(e.code());
    if (code == errc::ok) return make_error(errc::internal, "a kvc error with code ok");
    return make_error(code, context_text(e.context()));
  }
  if (e.category() == caf::atom("system")) {
    auto s = static_cast<caf::sec>(e.code());
    return make_error(from_sec(s), with_context("caf: " + to_string(s), e.context()));
  }
  if (e.category() == caf::atom("exit")) {
    auto r = static_cast<caf::exit_reason>(e.code());
    return make_error(errc::io_error, with_context("caf exit: " + to_string(r), e.context()));
  }
  return make_error(errc::internal, "caf: " + to_string(e));
}

std::string render_kvc_error(uint8_t code, const caf::message& context) {
  return with_context("kvc: " + std::string(to_string(static_cast<errc>(code))), context);
}

}  // namespace kvc::control
