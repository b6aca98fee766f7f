#!/usr/bin/env python3
"""Golden test of `kvconnect replay`: runs the binary on an op file and compares its output
with the checked-in answers, line by line and exactly. The exit code must be 1 iff some
answer is an error line, else 0.

usage: replay_check.py KVCONNECT OPS.jsonl EXPECTED
"""
import subprocess
import sys


def main():
    binary, ops, expected_path = sys.argv[1:4]
    run = subprocess.run([binary, "replay", ops], capture_output=True, text=True, timeout=60)
    got = run.stdout.splitlines()
    with open(expected_path) as f:
        want = f.read().splitlines()
    ok = True
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else "<missing>"
        w = want[i] if i < len(want) else "<missing>"
        if g != w:
            print(f"answer {i + 1}:\n  got:  {g}\n  want: {w}")
            ok = False
    want_rc = 1 if any(line.startswith('{"error":') for line in want) else 0
    if run.returncode != want_rc:
        print(f"exit code {run.returncode}, want {want_rc}; stderr: {run.stderr.strip()}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
