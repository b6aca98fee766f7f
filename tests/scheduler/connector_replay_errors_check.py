#!/usr/bin/env python3
"""Bad input to `kvconnect replay --connector`: each bad line gets one error line naming its line
number, the replay goes on with the next line, and the exit code is 1. Covers invalid JSON, an
unknown op, a connector call before `config`, an unknown request, a wrong field type, a line
over the length bound, invalid UTF-8, and the gzip path (the same trace compressed gives the same answers).

usage: connector_replay_errors_check.py KVCONNECT
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

CONFIG = {"op": "config", "gpu_block_size": 4, "block_size_factor": 1,
          "offloaded_block_size": 4, "hash_block_size": 4, "hash_block_size_factor": 1,
          "num_cpu_blocks": 2, "eviction_policy": "lru", "store_threshold": 0,
          "reuse_filter": False, "max_tracker_size": None, "enable_prefix_caching": True,
          "enable_kv_cache_events": True, "num_gpu_blocks": 64}


def j(o):
    return json.dumps(o)


def run(binary, path_or_dash, stdin=None):
    r = subprocess.run([binary, "replay", "--connector", path_or_dash], input=stdin,
                       capture_output=True, timeout=60)
    out = r.stdout.decode("utf-8", errors="replace")
    return r.returncode, [json.loads(x) for x in out.splitlines() if x.strip()]


def main():
    binary = sys.argv[1]
    lines = [
        j({"op": "get_num_new_matched_tokens", "req": "r0", "num_tokens": 8,
           "num_computed_tokens": 0}),                                      # 1: before config
        j(CONFIG),                                                          # 2
        "{not json",                                                        # 3
        j({"op": "warp_drive"}),                                            # 4
        j({"op": "add_request", "req": "r0", "num_tokens": 8, "block_hashes": [101, 102],
           "kv_transfer_params": None}),                                    # 5
        "x" * (2 << 20),                                                    # 6: over the bound
        j({"op": "get_num_new_matched_tokens", "req": "r9", "num_tokens": 8,
           "num_computed_tokens": 0}),                                      # 7: unknown request
        j({"op": "get_num_new_matched_tokens", "req": "r0", "num_tokens": 8,
           "num_computed_tokens": "zero"}),                                 # 8: wrong type
        j({"op": "get_num_new_matched_tokens", "req": "r0", "num_tokens": 8,
           "num_computed_tokens": 0, "out": [12345, True]}),                # 9: fine
        j({"op": "take_events"}),                                           # 10: fine
    ]
    # 11: invalid UTF-8 inside a malformed line: still one error line quoting it
    text = ("\n".join(lines) + "\n").encode() + b'{"op": "config", \xff\xfe\n'

    want = [
        ("error", 1, "get_num_new_matched_tokens"),
        ("error", 3, None),
        ("error", 4, "warp_drive"),
        ("error", 6, None),
        ("error", 7, "get_num_new_matched_tokens"),
        ("error", 8, "get_num_new_matched_tokens"),
        ("answer", 9, {"op": "get_num_new_matched_tokens", "out": [0, False]}),
        ("answer", 10, {"op": "take_events", "out": []}),
        ("error", 11, None),
    ]
    problems = []
    rc, got = run(binary, "-", text)
    if rc != 1:
        problems.append(f"exit code {rc}, want 1")
    if len(got) != len(want):
        problems.append(f"{len(got)} output lines, want {len(want)}: {got}")
    for g, (kind, line_no, what) in zip(got, want):
        if kind == "error":
            msg = g.get("error", "")
            if not msg.startswith(f"line {line_no}: ") or g.get("op") != what:
                problems.append(f"line {line_no}: want an error line (op {what}), got {g}")
        elif g != what:
            problems.append(f"line {line_no}: got {g}, want {what}")

    # The same trace (good lines only) through a gzip file and through stdin: same answers.
    good = [lines[1], lines[4], lines[8], lines[9]]
    plain = ("\n".join(good) + "\n").encode()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.jsonl.gz")
        with gzip.open(path, "wb") as f:
            f.write(plain)
        rc_gz, got_gz = run(binary, path)
    rc_in, got_in = run(binary, "-", plain)
    if rc_in != 0 or len(got_in) != 2:
        problems.append(f"stdin: exit {rc_in}, {got_in}")
    if (rc_gz, got_gz) != (rc_in, got_in):
        problems.append(f"gzip file: exit {rc_gz}, {got_gz}; stdin: exit {rc_in}, {got_in}")

    for p in problems:
        print(p)
    if not problems:
        print("bad lines: one error line each, the replay went on; gzip input read")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
