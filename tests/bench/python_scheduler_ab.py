#!/usr/bin/env python3
"""Two builds of the Python module through python_scheduler_bench.py, alternated (a benchmark,
not a test; docs/benchmarks.md, "Python binding").

Each build is a directory holding `python/` (the build's build/python) and `kvconnect` (its
binary), e.g. copies of two commits' build outputs. Every round runs the benchmark once with each
build, the order swapped every round (base first in odd rounds), so both meet the same phases of
a noisy host. Prints each run's JSON lines, then per request count and path: each build's mean
µs per step over the rounds (median and range), its ratio to the C++ planner of the same run,
and the paired ratio new / base of the same round (median and range).

usage: python_scheduler_ab.py BASE_DIR NEW_DIR [--rounds 10] [--realtime] [bench arguments...]
  e.g. python_scheduler_ab.py /tmp/base /tmp/new --rounds 10 --requests 64,256,1024 --steps 500
  (--realtime runs each benchmark under `chrt -f 10`; without --path the builds run the
  tuples and vllm paths, not the r1 baseline, which is the same code in both)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent / "python_scheduler_bench.py"


def run(build: Path, realtime: bool, bench_args: list[str]) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(build / "python"))
    cmd = [sys.executable, str(BENCH), str(build / "kvconnect"), *bench_args]
    if realtime:
        cmd = ["chrt", "-f", "10", *cmd]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def spread(values: list[float]) -> str:
    return (f"{min(values):.2f}–{max(values):.2f} (median {statistics.median(values):.2f})"
            if values else "-")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--realtime", action="store_true")
    args, bench_args = ap.parse_known_args()
    if not any(a == "--path" or a.startswith("--path=") for a in bench_args):
        bench_args += ["--path", "tuples,vllm"]
    for build in (args.base, args.new):
        if not (build / "kvconnect").is_file() or not (build / "python" / "kvconnect").is_dir():
            ap.error(f"{build}: needs kvconnect and python/kvconnect (a build's outputs)")
    # (side, requests, path) -> [(round, mean, ratio to C++)]
    steps: dict[tuple, list] = {}
    calls: dict[tuple, list] = {}
    for r in range(1, args.rounds + 1):
        order = ("base", "new") if r % 2 else ("new", "base")
        for side in order:
            for line in run(getattr(args, side), args.realtime, bench_args):
                print(json.dumps({**line, "round": r, "side": side}), flush=True)
                if line["bench"] == "python_scheduler":
                    steps.setdefault((side, line["requests"], line["path"]), []).append(
                        (r, line["us_per_step"], line["ratio_to_cxx"]))
                elif line["bench"] == "python_call":
                    for name in ("jobs_in_flight", "request_finished_unknown"):
                        calls.setdefault((side, name), []).append(
                            line[name] - line["python_loop_and_lambda"])
    print("# mean µs per step over the rounds: min–max (median); ratio to the C++ planner of "
          "the same run; paired new / base of the same round")
    for (side, n, path) in sorted(k for k in steps if k[0] == "base"):
        base = dict((r, m) for r, m, _ in steps[(side, n, path)])
        new = steps.get(("new", n, path), [])
        paired = [m / base[r] for r, m, _ in new if r in base]
        print(json.dumps({
            "requests": n, "path": path,
            "base_us": spread([m for _, m, _ in steps[(side, n, path)]]),
            "base_ratio": spread([x for _, _, x in steps[(side, n, path)]]),
            "new_us": spread([m for _, m, _ in new]),
            "new_ratio": spread([x for _, _, x in new]),
            "paired_new_over_base": spread(paired)}, ensure_ascii=False))
    for (side, name), ns in sorted(calls.items()):
        print(json.dumps({"call": name, "side": side, "ns_loop_subtracted": spread(ns)},
                         ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
