#include "launch/trace/chrome_trace.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "actors/trace/traced_transport.hpp"

namespace kvc::launch {

namespace {

using json = nlohmann::json;
using trace::direction;

/// The record's start on the reference clock.
int64_t start_of(const traced_record& r, const std::vector<int64_t>& offset) {
  return r.record.mono_ns - r.record.dur_ns + offset[r.process];
}

json args_of(const trace::trace_record& r) {
  json a = json::object();
  if (r.step >= 0) a["step"] = r.step;
  if (r.rank >= 0) a["rank"] = r.rank;
  if (r.job >= 0) a["job"] = r.job;
  if (!r.request.empty()) a["request"] = r.request;
  if (r.bytes != 0) a["bytes"] = r.bytes;
  if (!r.msg.empty()) a["msg"] = r.msg;
  if (!r.note.empty()) a["note"] = r.note;
  if (r.value >= 0) a["value"] = r.value;
  return a;
}

std::string slice_name(const trace::trace_record& r) {
  switch (r.dir) {
    case direction::send:
      return "send " + r.type;
    case direction::receive:
      return "receive " + r.type;
    case direction::local:
      break;
  }
  return r.type;
}

}  // namespace

std::vector<linked_message> link_messages(const trace_set& set) {
  std::unordered_map<std::string, size_t> sends;
  std::unordered_map<std::string, size_t> receives;
  for (size_t i = 0; i < set.records.size(); ++i) {
    const auto& r = set.records[i].record;
    if (r.msg.empty()) continue;
    if (r.dir == direction::send) sends.try_emplace(r.msg, i);
    if (r.dir == direction::receive) receives.try_emplace(r.msg, i);
  }
  std::vector<linked_message> out;
  for (const auto& [id, s] : sends) {
    auto it = receives.find(id);
    if (it != receives.end()) out.push_back({s, it->second});
  }
  std::sort(out.begin(), out.end(),
            [](const linked_message& a, const linked_message& b) { return a.send < b.send; });
  return out;
}

std::vector<message_pair> message_pairs(const trace_set& set,
                                        const std::vector<linked_message>& links) {
  std::vector<message_pair> out;
  out.reserve(links.size());
  for (const auto& l : links) {
    const auto& s = set.records[l.send];
    const auto& r = set.records[l.receive];
    out.push_back({s.process, r.process, s.record.mono_ns, r.record.mono_ns});
  }
  return out;
}

std::vector<int64_t> estimate_set_offsets(const trace_set& set,
                                          const std::vector<linked_message>& links) {
  const auto n = static_cast<uint32_t>(set.processes.size());
  // Wall clocks first: each process's (wall - mono) against process 0's.
  std::vector<int64_t> wall_minus_mono(n, 0);
  std::vector<bool> seen(n, false);
  for (const auto& r : set.records) {
    if (seen[r.process]) continue;
    seen[r.process] = true;
    wall_minus_mono[r.process] = r.record.wall_ns - r.record.mono_ns;
  }
  std::vector<int64_t> initial(n, 0);
  for (uint32_t p = 0; p < n; ++p) initial[p] = wall_minus_mono[p] - wall_minus_mono[0];
  const auto pairs = message_pairs(set, links);
  return estimate_offsets(n, pairs, 0, std::move(initial));
}

json to_chrome_trace(const trace_set& set) {
  const auto links = link_messages(set);
  const auto offset = estimate_set_offsets(set, links);
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& r : set.records) origin = std::min(origin, start_of(r, offset));
  auto us = [origin](int64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };

  // pid: process index + 1; tid: per (process, track), from 1.
  std::map<std::pair<uint32_t, std::string>, int> tids;
  auto tid_of = [&tids](uint32_t process, const std::string& track) {
    auto [it, fresh] = tids.try_emplace({process, track}, static_cast<int>(tids.size()) + 1);
    return it->second;
  };

  // Sortable events: (pid, tid, ts, -dur, order) keeps each track in time order, enclosing
  // slices before what they enclose.
  struct event {
    int pid;
    int tid;
    int64_t ts_ns;
    int64_t dur_ns;
    size_t order;
    json body;
  };
  std::vector<event> events;
  auto add = [&](uint32_t process, const std::string& track, int64_t ts_ns, int64_t dur_ns,
                 json body) {
    const int pid = static_cast<int>(process) + 1;
    const int tid = tid_of(process, track);
    body["pid"] = pid;
    body["tid"] = tid;
    body["ts"] = us(ts_ns);
    events.push_back({pid, tid, ts_ns, dur_ns, events.size(), std::move(body)});
  };

  // Slices: one per record (spans with their length, the rest of zero length).
  std::map<std::pair<uint32_t, std::string>, int64_t> track_jobs;  // (process, track) -> in flight
  std::map<std::tuple<uint32_t, int64_t, int64_t>, bool> job_open;
  for (const auto& tr : set.records) {
    const auto& r = tr.record;
    const int64_t ts = start_of(tr, offset);
    const std::string cat = r.dir == direction::local ? "local" : "msg";
    add(tr.process, r.track, ts, r.dur_ns,
        {{"ph", "X"},
         {"name", slice_name(r)},
         {"cat", cat},
         {"dur", r.dur_ns / 1000.0},
         {"args", args_of(r)}});
    if (r.value >= 0 && r.track == "scheduler") {
      const bool pool = r.type == "pool_slots";
      add(tr.process, r.track, r.mono_ns + offset[tr.process], 0,
          {{"ph", "C"},
           {"name", pool ? "pool slots used" : "jobs in flight"},
           {"args", {{pool ? "slots" : "planner", r.value}}}});
    }
    // Jobs: async slices, a rank's copy jobs from taken on to complete, the file tier's jobs
    // from planned to applied (on their own tracks), and each track's jobs in flight.
    const bool copy_job = r.type == "job_submit" || r.type == "job_complete";
    const bool tier_job =
        trace::is_tier_track(r.track) && (r.type == "job_planned" || r.type == "job_applied");
    if (r.job >= 0 && (copy_job || tier_job)) {
      const bool begin = r.type == "job_submit" || r.type == "job_planned";
      const auto key = std::make_tuple(tr.process, r.rank, r.job);
      if (begin == job_open[key]) continue;  // an end without a begin, or a repeated begin
      job_open[key] = begin;
      int64_t& in_flight = track_jobs[{tr.process, r.track}];
      in_flight += begin ? 1 : -1;
      const std::string id = (copy_job ? "r" + std::to_string(r.rank) : std::string{"t"}) + "j" +
                             std::to_string(r.job);
      add(tr.process, r.track, r.mono_ns + offset[tr.process], 0,
          {{"ph", begin ? "b" : "e"},
           {"cat", copy_job ? "job" : "tier"},
           {"name", (copy_job ? "job " : "tier job ") + std::to_string(r.job)},
           {"id", id},
           {"args", args_of(r)}});
      add(tr.process, r.track, r.mono_ns + offset[tr.process], 0,
          {{"ph", "C"}, {"name", "jobs in flight " + r.track}, {"args", {{"jobs", in_flight}}}});
    }
  }
  // Flows: one id per linked message.
  uint64_t flow = 0;
  for (const auto& l : links) {
    const auto& s = set.records[l.send];
    const auto& r = set.records[l.receive];
    ++flow;
    add(s.process, s.record.track, start_of(s, offset), 0,
        {{"ph", "s"}, {"cat", "msg"}, {"name", s.record.type}, {"id", flow}, {"bind_id", flow}});
    add(r.process, r.record.track, start_of(r, offset), 0,
        {{"ph", "f"},
         {"bp", "e"},
         {"cat", "msg"},
         {"name", r.record.type},
         {"id", flow},
         {"bind_id", flow}});
  }
  std::sort(events.begin(), events.end(), [](const event& a, const event& b) {
    return std::tie(a.pid, a.tid, a.ts_ns, b.dur_ns, a.order) <
           std::tie(b.pid, b.tid, b.ts_ns, a.dur_ns, b.order);
  });

  json out_events = json::array();
  for (uint32_t p = 0; p < set.processes.size(); ++p) {
    const auto& proc = set.processes[p];
    out_events.push_back({{"ph", "M"},
                          {"name", "process_name"},
                          {"pid", p + 1},
                          {"tid", 0},
                          {"args",
                           {{"name", proc.role + " pid " + std::to_string(proc.pid) + " node " +
                                         std::to_string(proc.node)}}}});
  }
  for (const auto& [key, tid] : tids) {
    out_events.push_back({{"ph", "M"},
                          {"name", "thread_name"},
                          {"pid", key.first + 1},
                          {"tid", tid},
                          {"args", {{"name", key.second}}}});
  }
  for (auto& e : events) out_events.push_back(std::move(e.body));
  json offsets = json::object();
  for (uint32_t p = 0; p < set.processes.size(); ++p) {
    offsets[std::to_string(set.processes[p].pid)] = offset[p];
  }
  return {{"traceEvents", std::move(out_events)},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"generator", "kvconnect trace export"},
            {"clock_offsets_ns", std::move(offsets)},
            {"linked_messages", links.size()},
            {"cut_lines", set.cut_lines}}}};
}

}  // namespace kvc::launch
