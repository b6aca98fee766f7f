#!/usr/bin/env python3
"""`kvconnect bench manager` and reference_manager.py bench must report identical counters
(requests, key_ops, hit_blocks, stored, evicted, store_fail) on the same small generated trace,
for lru, arc and lru + reuse filter (threshold 2).

usage: bench_counters_check.py KVCONNECT [--requests 3000] [--capacity 2048]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_manager.py")
COUNTERS = ("requests", "key_ops", "hit_blocks", "stored", "evicted", "store_fail")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kvconnect")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--capacity", type=int, default=2048)
    a = p.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace")
        with open(trace, "w") as f:
            subprocess.run([a.kvconnect, "bench", "gen-trace", "--requests", str(a.requests),
                            "--seed", "0"], stdout=f, check=True, timeout=120)
        for policy, threshold in (("lru", 0), ("arc", 0), ("lru", 2)):
            args = ["--trace", trace, "--policy", policy, "--store-threshold", str(threshold),
                    "--capacity", str(a.capacity)]
            cpp = json.loads(subprocess.run([a.kvconnect, "bench", "manager", *args],
                                            capture_output=True, text=True, check=True,
                                            timeout=300).stdout)
            py = json.loads(subprocess.run([sys.executable, REFERENCE, "bench", *args],
                                           capture_output=True, text=True, check=True,
                                           timeout=300).stdout)
            same = all(cpp[c] == py[c] for c in COUNTERS)
            ok &= same
            print(f"{policy} threshold {threshold}: "
                  + ", ".join(f"{c} {cpp[c]}" + ("" if cpp[c] == py[c] else f" (Python {py[c]})")
                              for c in COUNTERS)
                  + ("" if same else "  MISMATCH"))
            if cpp["stored"] == 0 or cpp["hit_blocks"] == 0:
                print("  the trace exercised nothing")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
