#pragma once
/// kvc::errc inside CAF. CAF_ERROR_CODE_ENUM lets an errc convert to a caf::error of category
/// "kvc" (`caf::error e = errc::timeout;` or `caf::make_error(errc::timeout, "why")`), so a
/// request handler can answer with a kvc error and a remote caller sees the same code.
/// to_status maps any caf::error back, including CAF's own ("system" and "exit" categories:
/// request timeouts, unreachable nodes, interface mismatches). Stateless, thread-safe.
// CAF_ERROR_CODE_ENUM expands to code calling make_message: caf/error.hpp alone does not compile.
#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include "actors/control/atoms.hpp"
#include "proto/errc.hpp"
#include "proto/status.hpp"

CAF_ERROR_CODE_ENUM(kvc::errc, "kvc")

namespace kvc::control {

/// caf::none for a success; otherwise a "kvc" error whose context holds the message.
caf::error to_caf_error(const status& s);

/// status{} for caf::none; the errc and message of a "kvc" error; CAF's errors mapped to the
/// nearest errc (timeouts → timeout, lost peers → io_error, handshake/interface refusals →
/// protocol_mismatch, others → internal) with CAF's description as the message.
status to_status(const caf::error& e);

/// Text of an error of category "kvc", as registered with the actor system (system.render()).
std::string render_kvc_error(uint8_t code, const caf::message& context);

}  // namespace kvc::control
