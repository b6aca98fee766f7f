#!/usr/bin/env python3
"""Instructions a decode step's connector calls execute, per path of python_scheduler_bench.py
(a benchmark, not a test; docs/benchmarks.md, "Python binding"): the count the host's noise
cannot move, next to that benchmark's times.

Each path runs in a process of its own under valgrind's callgrind, its timed calls (and only
they) going through one C function, kvc_timed_call (tests/bench/timed_call.c, built here with
the C compiler against /usr/bin/python3's headers), on which callgrind toggles its counting.
Every path runs twice, STEPS and 2 * STEPS timed steps after the same set-up; the difference over
STEPS is its instructions per step. Prints one JSON line per path with `instructions_per_step`,
and, for the baselines (r1, r1_source), `over_vllm`: theirs over the vllm path's.

--cache-sim adds callgrind's cache model, its last level set to one core's 2 MiB L2 (D1 48 KiB),
and each line the lines read and written from beyond it a step (`ll_read_misses_per_step`,
`ll_write_misses_per_step`); --sweep BYTES makes the engine stand-in write one byte in every
64 of a BYTES buffer before each step, untimed, so that every step starts with cold caches.

usage: timed_instructions.py [--requests 256] [--steps 100] [--path vllm,r1,r1_source]
                             [--vllm-source DIR] [--cache-sim] [--sweep BYTES] [--keep DIR]
  (PYTHONPATH must hold build/python; needs valgrind and a C compiler)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vllm_r1_source  # noqa: E402

CHILD = """
import sys
import timed_call
import python_scheduler_bench as b
n, path, steps, source = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
sweep = bytearray(int(sys.argv[5]))
zeros = bytes((len(sweep) + 63) // 64)
if source:
    b.R1SourceCalls.load(source)
b.Calls.timed = lambda self, f, *args: timed_call.call(f, *args)
step = b.Bench.step
def swept_step(self):
    sweep[::64] = zeros
    return step(self)
if sweep:
    b.Bench.step = swept_step
b.Bench(n, f"bench-instr-{path}-{steps}", path).run(steps)
"""
CACHE_SIM = ["--cache-sim=yes", "--D1=49152,12,64", "--LL=2097152,16,64"]


def build_timed_call(out_dir: Path) -> None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    cmd = [os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC",
           "-I" + sysconfig.get_paths()["include"], str(HERE / "timed_call.c"),
           "-o", str(out_dir / ("timed_call" + suffix))]
    subprocess.run(cmd, check=True)


def counts(work: Path, n: int, path: str, steps: int, args) -> dict:
    """callgrind's events inside the timed calls of a run with `steps` timed steps."""
    out = Path(args.keep or work) / f"callgrind.{path}.{steps}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(work), str(HERE), env.get("PYTHONPATH", "")])
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                    "--toggle-collect=kvc_timed_call", f"--callgrind-out-file={out}",
                    *(CACHE_SIM if args.cache_sim else []),
                    sys.executable, "-c", CHILD, str(n), path, str(steps), args.vllm_source,
                    str(args.sweep)],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    text = out.read_text()
    events = re.search(r"^events: (.+)$", text, re.MULTILINE)
    totals = re.search(r"^(?:totals|summary): (.+)$", text, re.MULTILINE)
    if events is None or totals is None:
        raise RuntimeError(f"{out}: no events or totals line")
    return dict(zip(events.group(1).split(), map(int, totals.group(1).split())))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--path", default="vllm,r1,r1_source")
    ap.add_argument("--vllm-source", metavar="DIR", default="",
                    help="a vLLM source tree at R1, for the r1_source path")
    ap.add_argument("--cache-sim", action="store_true",
                    help="also count the lines read and written beyond a 2 MiB last level")
    ap.add_argument("--sweep", type=int, default=0, metavar="BYTES",
                    help="write one byte in every 64 of BYTES before each step (cold caches)")
    ap.add_argument("--keep", metavar="DIR",
                    help="write callgrind's outputs (callgrind.PATH.STEPS) to DIR, for "
                         "callgrind_annotate")
    args = ap.parse_args()
    paths = args.path.split(",")
    vllm_r1_source.check_argument(ap, paths, args.vllm_source)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.sweep < 0:
        ap.error("--sweep must be 0 or more")
    per_step = {}
    with tempfile.TemporaryDirectory(prefix="kvc-instr-") as tmp:
        work = Path(tmp)
        build_timed_call(work)
        for path in paths:
            once = counts(work, args.requests, path, args.steps, args)
            twice = counts(work, args.requests, path, 2 * args.steps, args)
            step = {k: (twice[k] - once[k]) / args.steps for k in once}
            per_step[path] = step["Ir"]
            line = {"bench": "python_scheduler_instructions", "path": path,
                    "requests": args.requests, "steps": args.steps, "sweep_bytes": args.sweep,
                    "instructions_per_step": round(step["Ir"])}
            if args.cache_sim:
                line["ll_read_misses_per_step"] = round(step["DLmr"])
                line["ll_write_misses_per_step"] = round(step["DLmw"])
            if path != "vllm" and "vllm" in per_step:
                line["over_vllm"] = round(per_step[path] / per_step["vllm"], 2)
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
