#!/usr/bin/env python3
"""Differential test: random op sequences (gen_random_ops.py) answered by `kvconnect replay`
and by reference_manager.py must produce identical output, line for line, and the same exit
code. Covers lru, arc and the reuse filter on both, over several small capacities and seeds.

usage: differential_replay.py KVCONNECT [--seeds N] [--ops N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_random_ops  # noqa: E402

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_manager.py")
CONFIGS = [  # (policy, store_threshold, max_tracker_size)
    ("lru", 0, 8), ("arc", 0, 8), ("lru", 2, 6), ("arc", 3, 5), ("lru", 2, 1),
]
CAPACITIES = [1, 2, 3, 5, 8]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kvconnect")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--ops", type=int, default=3000)
    a = p.parse_args()
    total = errors = 0
    with tempfile.TemporaryDirectory() as tmp:
        for policy, threshold, tracker in CONFIGS:
            for capacity in CAPACITIES:
                for seed in range(a.seeds):
                    lines = gen_random_ops.generate(seed * 1000 + capacity, a.ops, policy,
                                                    capacity, threshold, tracker)
                    path = os.path.join(tmp, "ops.jsonl")
                    with open(path, "w") as f:
                        f.write("\n".join(lines) + "\n")
                    cpp = subprocess.run([a.kvconnect, "replay", path], capture_output=True,
                                         text=True, timeout=120)
                    py = subprocess.run([sys.executable, REFERENCE, "replay", path],
                                        capture_output=True, text=True, timeout=120)
                    got, want = cpp.stdout.splitlines(), py.stdout.splitlines()
                    name = f"{policy} t={threshold} tracker={tracker} cap={capacity} seed={seed}"
                    if got != want or cpp.returncode != py.returncode:
                        for i, (g, w) in enumerate(zip(got + ["<end>"], want + ["<end>"])):
                            if g != w:
                                op = lines[i] if i < len(lines) else ""
                                print(f"DIFF {name} at op {i + 1}: {op}")
                                print(f"  C++:    {g}\n  Python: {w}")
                                break
                        else:
                            print(f"DIFF {name}: exit codes {cpp.returncode} vs {py.returncode}")
                        return 1
                    total += len(lines)
                    errors += sum(1 for line in got if line.startswith('{"error"'))
    print(f"identical answers for {total} ops ({errors} precondition errors among them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
