#pragma once
/// The text form of a fault: `kind:key=value,key=value,...` (docs/faults.md), e.g.
/// `drop_report:rank=1,p=0.05`, `kill_rank:rank=2,step=300`,
/// `fail_copy:dir=load,at=completion,nth=3`. parse_fault_spec reads one; format_fault_spec
/// writes the canonical text that parses back to the same spec (what a launcher forwards).
///
/// Keys: rank=N; dir=store|load|any; at=submit|completion; op=read|write|any (fail_io);
/// step=N; steps=A-B (or A- : open); p=X or nth=N (exactly one, channel, copy and tier faults);
/// max=N (fires at most); by=N or ms=N (delay_report, exactly one: steps or milliseconds held);
/// after=N (delay_copy, transfers); bits=N (corrupt_frame); resume=MS|never (hang_rank). Each kind takes only its keys (fault_spec_keys).
/// Pure functions; thread-safe.
#include <span>
#include <string>
#include <string_view>

#include "proto/fault_plan.hpp"
#include "proto/status.hpp"

namespace kvc {

/// One spec. errc::invalid_argument with one line naming the spec and what is wrong: an
/// unknown kind (listing the kinds), an unknown or repeated key (listing the kind's keys), a
/// value that does not parse, a missing trigger or step, or what validate(fault_spec) refuses.
result<fault_spec> parse_fault_spec(std::string_view text);

/// The canonical text of a valid spec; parse_fault_spec gives it back unchanged.
std::string format_fault_spec(const fault_spec& spec);

/// Every kind's name, in fault_kind order.
std::span<const std::string_view> fault_kind_names() noexcept;
/// The keys `kind` accepts.
std::span<const std::string_view> fault_spec_keys(fault_kind kind) noexcept;

}  // namespace kvc
