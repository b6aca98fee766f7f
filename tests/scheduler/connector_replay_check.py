#!/usr/bin/env python3
"""Conformance of kvconnect's planner with vLLM R1's OffloadingConnectorScheduler: replays a
connector trace (tests/scheduler/connector_traces/README.md) with `kvconnect replay --connector`
and compares its answers with the trace's under the format's comparison rules:

  - answers are compared field by field, in order, one per connector-call line;
  - BlockStored hashes are compared sorted;
  - within one take_events answer, consecutive events of the same type are merged (their
    block_hashes concatenated) before comparing;
  - diagnostic fields are not compared: update_state_after_alloc's out, a job's keys.

The replayer gets the trace without its `out` and `calls` fields and without `state` lines.

usage: connector_replay_check.py KVCONNECT TRACE[.gz] [--show N]
exit 0 iff every answer is identical, no error line was printed and kvconnect exited 0.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys

CALLS = {
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "build_connector_meta",
    "request_finished",
    "update_connector_output",
    "take_events",
}
DIAG_OUT = {"update_state_after_alloc"}


def read_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def strip(lines):
    """The replayer's input: no out, no calls, no state lines."""
    out = []
    for o in lines:
        if o["op"] == "state":
            continue
        o = {k: v for k, v in o.items() if k not in ("out", "calls")}
        out.append(json.dumps(o, separators=(",", ":")))
    return "\n".join(out) + "\n"


def norm_job(j):
    return {k: v for k, v in j.items() if k != "keys"}


def norm_events(events):
    merged = []
    for e in events:
        if merged and merged[-1]["type"] == e["type"]:
            merged[-1]["block_hashes"] = merged[-1]["block_hashes"] + list(e["block_hashes"])
        else:
            merged.append(dict(e, block_hashes=list(e["block_hashes"])))
    for e in merged:
        if e["type"] == "BlockStored":
            e["block_hashes"] = sorted(e["block_hashes"])
    return merged


def norm(op, out):
    if op in DIAG_OUT:
        return None
    if op == "build_connector_meta" and isinstance(out, dict):
        return {
            "load": [norm_job(j) for j in out.get("load", [])],
            "store": [norm_job(j) for j in out.get("store", [])],
            "flush": out.get("flush"),
        }
    if op == "take_events" and isinstance(out, list):
        return norm_events(out)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvconnect")
    ap.add_argument("trace")
    ap.add_argument("--show", type=int, default=5, help="mismatches to print")
    args = ap.parse_args()
    if not os.path.isfile(args.trace):
        print(f"connector trace {args.trace} not found: the conformance traces live in "
              "tests/scheduler/connector_traces/")
        return 1

    trace = read_trace(args.trace)
    expected = [(i + 1, o["op"], o.get("out")) for i, o in enumerate(trace) if o["op"] in CALLS]
    run = subprocess.run([args.kvconnect, "replay", "--connector", "-"], input=strip(trace),
                         capture_output=True, text=True, timeout=300)
    got = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]

    problems = []
    errors = [g for g in got if "error" in g]
    for e in errors[: args.show]:
        problems.append(f"error line: {e['error']}")
    answers = [g for g in got if "error" not in g]
    if len(answers) != len(expected):
        problems.append(f"{len(answers)} answers for {len(expected)} connector calls")
    mismatches = 0
    for (line_no, op, want), g in zip(expected, answers):
        if g.get("op") != op:
            problems.append(f"trace line {line_no}: answer for {g.get('op')}, want {op}")
            break  # out of step: later answers say nothing
        if norm(op, g.get("out")) != norm(op, want):
            mismatches += 1
            if mismatches <= args.show:
                problems.append(f"trace line {line_no} ({op}):\n  got:  "
                                f"{json.dumps(norm(op, g.get('out')))}\n  want: "
                                f"{json.dumps(norm(op, want))}")
    if mismatches > args.show:
        problems.append(f"... {mismatches - args.show} more mismatching answers")
    if run.returncode != 0:
        problems.append(f"kvconnect exited {run.returncode}; stderr: {run.stderr.strip()}")

    name = os.path.basename(args.trace)
    if problems:
        print(f"{name}: {mismatches} of {len(expected)} answers differ")
        for p in problems:
            print(p)
        return 1
    print(f"{name}: {len(expected)} answers identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
