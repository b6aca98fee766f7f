#!/usr/bin/env python3
"""The scheduler side through Python (kvconnect.SchedulerConnector) on `kvconnect bench
planner`'s decode workload, with the C++ planner's figures from the same run (a benchmark, not a
test; docs/benchmarks.md, "Python binding").

Workload (as bench_planner_command.cpp): N running requests with 1,024-token prompts already
offloaded decode one token per step (GPU block = offloaded block = hash block = 16 tokens; phases
staggered); every step the 4 oldest finish and 4 arrive whose first 512 tokens are one of 64
shared prefixes: they look up, load the prefix (done the next step), then prefill and store the
rest. Every job's result is fed back, successful, one step after it was planned
(apply_job_results; no workers). Only the connector calls are timed (perf_counter_ns around
them); the Python engine stand-in's own work is not.

Two ways in, each timed (--path): "tuples", kvconnect.SchedulerConnector's calls with each
scheduled request spelled out as a tuple (the engine stand-in builds the tuples, untimed); and
"vllm", kvconnect.vllm.KvconnectConnector's calls with vLLM's objects (stand-ins with exactly
vLLM's fields, tests/python/vllm_standins.py; the engine stand-in builds them, as vLLM's
scheduler does): what a vLLM engine pays per step. Job results go back through
apply_job_results on both paths (no workers).

The Python side goes through the whole scheduler facade (planner, coordinator, step channel to
no rank), the C++ figure is the bare planner: the difference is the binding plus the facade.
Also measured: the cost of one cheap call through the binding (request_finished of an unknown id,
a property read).

usage: python_scheduler_bench.py KVCONNECT [--requests 64,256,1024] [--steps 1000]
                                 [--path tuples,vllm] [--by-call]
  (PYTHONPATH must hold build/python)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import kvconnect

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import vllm_standins as v  # noqa: E402
from kvconnect.vllm import KVConnectorRole, KvconnectConnector  # noqa: E402

BLOCK = 16
PROMPT = 1024
SHARED = 512
TURNOVER = 4
DOCS = 64
CAPACITY_PER_REQUEST = 160
MASK = (1 << 64) - 1


def chain(parent, salt):
    x = (parent ^ (salt * 0x9E3779B97F4A7C15)) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


class Request:
    __slots__ = ("id", "serial", "doc", "num_tokens", "hashes", "blocks", "vllm")

    def __init__(self, serial, extra):
        self.id = f"req-{serial}"
        self.serial = serial
        self.doc = serial % DOCS
        self.num_tokens = PROMPT + extra
        self.hashes = []
        self.blocks = []
        self.extend()
        # vLLM's Request for the "vllm" path: the same hash list, its counts kept in step.
        self.vllm = v.Request(self.id, self.hashes, self.num_tokens, 0, None)

    def extend(self):
        while (len(self.hashes) + 1) * BLOCK <= self.num_tokens:
            b = len(self.hashes)
            parent = self.hashes[-1] if self.hashes else 0x9E3779B9
            salt = (self.doc << 32) | b if b < SHARED // BLOCK else \
                ((self.serial << 20) ^ (b + 0xABCDEF)) + (1 << 62)
            self.hashes.append(chain(parent, salt))


def bench_config(n):
    return kvconnect.Config(
        topology={"tensor_parallel": 1},
        kv_cache={"gpu_block_size": BLOCK, "layers": 1, "page_bytes": 4096},
        offload={"cpu_bytes_to_use": n * CAPACITY_PER_REQUEST * 4096},
        runtime={"job_timeout_ms": 0, "job_timeout_steps": 0})


class Calls:
    """Times only the connector's calls (perf_counter_ns around each), not the engine stand-in's
    work of building their arguments; by_call sums each call's time apart (--by-call)."""

    def __init__(self):
        self.ns = 0
        self.by_call = {}

    def timed(self, f, *args):
        t0 = time.perf_counter_ns()
        out = f(*args)
        ns = time.perf_counter_ns() - t0
        self.ns += ns
        self.by_call[f.__name__] = self.by_call.get(f.__name__, 0) + ns
        return out


class TupleCalls(Calls):
    """The connector calls through kvconnect.SchedulerConnector, requests as tuples."""

    def __init__(self, n, instance):
        super().__init__()
        self.sc = kvconnect.SchedulerConnector(bench_config(n), instance=instance, token="bench",
                                               listen=False, transport="memory")

    def match(self, r, computed):
        return self.timed(self.sc.get_num_new_matched_tokens, r.id, r.hashes, r.num_tokens,
                          computed)

    def alloc(self, r, tokens):
        self.timed(self.sc.update_state_after_alloc, r.id, r.hashes, r.num_tokens, r.blocks,
                   None, tokens)

    @staticmethod
    def scheduled(r, computed, scheduled, blocks):
        return (r.id, r.hashes, r.num_tokens, computed, scheduled, blocks, False, False)

    def build(self, step, fresh, cached):
        return self.timed(self.sc.build_connector_meta, step, fresh, cached, [])

    def finished(self, r):
        self.timed(self.sc.request_finished, r.id)

    def output(self):
        return self.timed(self.sc.update_connector_output).finished_recving


class VllmCalls(Calls):
    """The connector calls through kvconnect.vllm.KvconnectConnector, with vLLM's objects (the
    stand-ins), which the engine stand-in builds untimed, as vLLM's scheduler does."""

    def __init__(self, n, instance):
        super().__init__()
        extra = {"cpu_bytes_to_use": n * CAPACITY_PER_REQUEST * 4096,
                 "runtime": {"instance": instance, "token": "bench", "job_timeout_ms": 0,
                             "job_timeout_steps": 0}}
        self.connector = KvconnectConnector(
            v.vllm_config(extra, instance, BLOCK), KVConnectorRole.SCHEDULER,
            v.kv_cache_config(1 << 20, 4096, BLOCK))
        self.sc = self.connector.scheduler

    def match(self, r, computed):
        r.vllm.num_tokens = r.num_tokens
        return self.timed(self.connector.get_num_new_matched_tokens, r.vllm, computed)

    def alloc(self, r, tokens):
        blocks = v.KVCacheBlocks(([v.KVCacheBlock(b, None, False) for b in r.blocks],))
        self.timed(self.connector.update_state_after_alloc, r.vllm, blocks, tokens)

    @staticmethod
    def scheduled(r, computed, scheduled, blocks):
        r.vllm.num_tokens = r.num_tokens
        r.vllm.num_computed_tokens = computed
        return (r.vllm.request_id, scheduled, blocks, computed)

    def build(self, step, fresh, cached):
        out = v.SchedulerOutput(
            [v.NewRequestData(rid, (blocks,), c) for rid, _, blocks, c in fresh],
            v.CachedRequestData([rid for rid, _, _, _ in cached], set(),
                                [None if b is None else (b,) for _, _, b, _ in cached],
                                [c for _, _, _, c in cached]),
            {rid: n for rid, n, _, _ in cached + fresh}, set(), [])
        self.timed(self.connector.build_connector_meta, out)
        return self.connector.planned

    def finished(self, r):
        self.timed(self.connector.request_finished, r.vllm, r.blocks)

    def output(self):
        out = v.KVConnectorOutput()
        self.timed(self.connector.update_connector_output, out)
        return out.finished_recving or ()


class Bench:
    def __init__(self, n, instance, path="tuples"):
        self.n = n
        self.calls = (VllmCalls if path == "vllm" else TupleCalls)(n, instance)
        self.sc = self.calls.sc
        self.step_no = 0
        self.serial = 0
        self.next_gpu = 1
        self.running = []
        self.waiting = []
        self.loading = {}
        self.promoted = []
        self.pending = []  # (job id, kind) of the last metadata

    def alloc(self, r):
        while len(r.blocks) * BLOCK < r.num_tokens:
            r.blocks.append(self.next_gpu)
            self.next_gpu = 1 if self.next_gpu >= (1 << 31) else self.next_gpu + 1

    def done_jobs(self, meta):
        self.pending = [(j.id, "load", True) for j in meta.loads] + \
            [(j.id, "store", True) for j in meta.stores]

    def populate(self):
        calls = self.calls
        for i in range(self.n):
            r = Request(self.serial, i % BLOCK)
            self.serial += 1
            calls.match(r, 0)
            self.alloc(r)
            self.step_no += 1
            meta = calls.build(self.step_no, [calls.scheduled(r, 0, r.num_tokens, r.blocks)], [])
            self.done_jobs(meta)
            self.sc.apply_job_results(self.step_no, self.pending)
            calls.output()
            r.num_tokens += 1
            r.extend()
            self.running.append(r)
        self.pending = []

    def step(self):
        """One engine step; returns the microseconds its connector calls took."""
        calls = self.calls
        before = calls.ns
        calls.timed(self.sc.apply_job_results, self.step_no, self.pending)
        for rid in calls.output():
            r = self.loading.pop(rid, None)
            if r is not None:
                self.promoted.append(r)

        for _ in range(min(TURNOVER, len(self.running))):
            calls.finished(self.running.pop(0))
        for _ in range(TURNOVER):
            self.waiting.append(Request(self.serial, 0))
            self.serial += 1

        fresh, owners = [], []
        for r in self.promoted:
            calls.match(r, SHARED)
            self.alloc(r)
            fresh.append(calls.scheduled(r, SHARED, r.num_tokens - SHARED, r.blocks))
            owners.append(r)
        self.promoted = []
        still = []
        for r in self.waiting:
            tokens, _ = calls.match(r, 0)
            if tokens is None:
                still.append(r)
                continue
            self.alloc(r)
            if tokens > 0:
                calls.alloc(r, tokens)
                self.loading[r.id] = r
            else:
                fresh.append(calls.scheduled(r, 0, r.num_tokens, r.blocks))
                owners.append(r)
        self.waiting = still

        cached = []
        for r in self.running:
            before_blocks = len(r.blocks)
            self.alloc(r)
            cached.append(calls.scheduled(r, r.num_tokens - 1, 1,
                                          r.blocks[before_blocks:] or None))

        self.step_no += 1
        self.done_jobs(calls.build(self.step_no, fresh, cached))
        for r in self.running:
            r.num_tokens += 1
            r.extend()
        for r in owners:
            r.num_tokens += 1
            r.extend()
            self.running.append(r)
        return (calls.ns - before) / 1000.0

    def run(self, steps):
        self.populate()
        for _ in range(self.n // TURNOVER + 64):
            self.step()
        self.calls.by_call = {}
        out = [self.step() for _ in range(steps)]
        stats = self.sc.stats()
        self.sc.shutdown()
        return out, stats

    def by_call_us(self, steps):
        """Each call's µs per step over the timed steps."""
        return {name: round(ns / steps / 1000.0, 2) for name, ns in self.calls.by_call.items()}


def call_cost_ns(instance, calls=200_000):
    """One cheap call through the binding: the best of 5 runs of `calls` calls."""
    config = kvconnect.Config(topology={"tensor_parallel": 1},
                              kv_cache={"gpu_block_size": BLOCK, "layers": 1, "page_bytes": 4096},
                              offload={"cpu_bytes_to_use": 64 * 4096})
    with kvconnect.SchedulerConnector(config, instance=instance, token="bench", listen=False,
                                      transport="memory") as sc:
        out = {}
        for name, f in (("request_finished_unknown", lambda: sc.request_finished("x")),
                        ("jobs_in_flight", lambda: sc.jobs_in_flight)):
            best = None
            for _ in range(5):
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    f()
                ns = (time.perf_counter_ns() - t0) / calls
                best = ns if best is None else min(best, ns)
            out[name] = round(best, 1)
        # The loop and the lambda alone, to subtract.
        best = None
        for _ in range(5):
            t0 = time.perf_counter_ns()
            noop = (lambda: None)
            for _ in range(calls):
                noop()
            ns = (time.perf_counter_ns() - t0) / calls
            best = ns if best is None else min(best, ns)
        out["python_loop_and_lambda"] = round(best, 1)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvconnect")
    ap.add_argument("--requests", default="64,256,1024")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--path", default="tuples,vllm")
    ap.add_argument("--by-call", action="store_true",
                    help="also give each connector call's µs per step")
    args = ap.parse_args()
    counts = [int(x) for x in args.requests.split(",")]
    paths = args.path.split(",")
    if not paths or any(p not in ("tuples", "vllm") for p in paths):
        ap.error("--path: tuples, vllm or both, comma-separated")
    tag = f"bench-py-{os.getpid()}"
    print(json.dumps({"bench": "python_call", **call_cost_ns(tag + "-call")}))
    for n in counts:
        cxx = subprocess.run([args.kvconnect, "bench", "planner", "--requests", str(n),
                              "--steps", str(args.steps), "--rounds", "1"],
                             capture_output=True, text=True, check=True)
        cxx_line = json.loads(cxx.stdout.strip().splitlines()[-1])
        for path in paths:
            bench = Bench(n, f"{tag}-{n}-{path}", path)
            step_us, _ = bench.run(args.steps)
            mean = statistics.fmean(step_us)
            s = sorted(step_us)
            line = {
                "bench": "python_scheduler", "path": path, "requests": n, "steps": len(s),
                "us_per_step": round(mean, 2), "p50_us": round(s[len(s) // 2], 2),
                "p99_us": round(s[int(0.99 * len(s))], 2),
                "cxx_planner_us_per_step": cxx_line["us_per_step"],
                "ratio_to_cxx": round(mean / cxx_line["us_per_step"], 2)}
            if args.by_call:
                line["by_call_us"] = bench.by_call_us(args.steps)
            print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
