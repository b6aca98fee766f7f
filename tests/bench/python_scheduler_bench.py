#!/usr/bin/env python3
"""The scheduler side through Python (kvconnect.SchedulerConnector) on `kvconnect bench
planner`'s decode workload, with the C++ planner's figures from the same run (a benchmark, not a
test; docs/benchmarks.md, "Python binding").

Workload (as bench_planner_command.cpp): N running requests with 1,024-token prompts already
offloaded decode one token per step (GPU block = offloaded block = hash block = 16 tokens; phases
staggered); every step the 4 oldest finish and 4 arrive whose first 512 tokens are one of 64
shared prefixes: they look up, load the prefix (done the next step), then prefill and store the
rest. The calls are vLLM's scheduler's: every request a step schedules from the waiting queue
gets update_state_after_alloc (0 external tokens when nothing loads), and only one whose
num_computed_tokens is 0 is looked up (get_num_new_matched_tokens): not one whose load is done.
Every job's result is fed back, successful, one step after it was planned
(apply_job_results; no workers). After each build_connector_meta the connector's take_events is
called, as vLLM's scheduler calls it every step (Scheduler.schedule / update_from_output); KV
events are off, vLLM's default (no kv_events_config), unless --kv-events: then every connector
records them and take_events hands them out. Only the connector calls are timed
(perf_counter_ns around them); the Python engine stand-in's own work is not.

Three ways in, each timed (--path): "tuples", kvconnect.SchedulerConnector's calls with each
scheduled request spelled out as a tuple (the engine stand-in builds the tuples, untimed);
"vllm", kvconnect.vllm.KvconnectConnector's calls with vLLM's objects (stand-ins with exactly
vLLM's fields, tests/python/vllm_standins.py; the engine stand-in builds them, as vLLM's
scheduler does): what a vLLM engine pays per step; and "r1", the baseline: vLLM R1's own
OffloadingConnector (scheduler role) in Python, tests/bench/reference_connector.py, called with
the same objects (its block hashes are 32-byte strings, as vLLM's), its take_events drained as
vLLM drains it. Job results go back through
apply_job_results on the kvconnect paths (no workers); R1 learns of them from
update_connector_output's KVConnectorOutput.finished_sending / finished_recving, which name the
requests whose stores / loads it planned the step before (R1's own worker names a storing request
in finished_sending only once it has finished; completing its stores a step after they were
planned, as kvconnect's jobs are, keeps the two connectors' offloaded blocks, hits and loads the
same).

"r1_source" (with --vllm-source DIR) is vLLM R1's connector itself: vLLM's own files from a
source tree of vLLM at R1, its scheduler and CPU manager unchanged (tests/bench/vllm_r1_source.py
says what it stands in for: the engine modules they import for type names), with the same
objects and calls as "r1".

The planned counts (loads_planned, load_blocks, stores_planned, store_blocks over the timed
steps) of r1 (else r1_source) must equal every other path's (kvconnect's stats(), R1's counted
off its metadata): the connectors plan the same transfers on this workload, or the benchmark
fails. The vllm line's r1_over_vllm (r1_source_over_vllm) is r1's (r1_source's) mean over vllm's
mean in the same round.

The Python side goes through the whole scheduler facade (planner, coordinator, step channel to
no rank), the C++ figure is the bare planner: the difference is the binding plus the facade.
Also measured: the cost of one cheap call through the binding (request_finished of an unknown id,
a property read).

With --rounds R the C++ planner and every path run R times per request count, the C++
planner first in odd rounds and last in even ones, the paths in the order given in odd rounds
and reversed in even ones (with --interleave K side by side, each path in a process of its
own: all set up, then K timed steps of each in turn, the turn's order reversed every turn, so
that the paths meet the same phases of the host); each round's line carries its own ratios,
and a last line per request count gives their spread (min, median, max) over the rounds: the
host's phases move every figure 1.5-2x, so a ratio is only read within a round.

usage: python_scheduler_bench.py KVCONNECT [--requests 64,256,1024] [--steps 1000]
                                 [--path tuples,vllm,r1,r1_source] [--rounds 1] [--by-call]
                                 [--kv-events] [--interleave K] [--vllm-source DIR]
  (PYTHONPATH must hold build/python)
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import kvconnect

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_connector as rc  # noqa: E402
import vllm_r1_source  # noqa: E402
import vllm_standins as v  # noqa: E402
from kvconnect.vllm import KVConnectorRole, KvconnectConnector  # noqa: E402

BLOCK = 16
PROMPT = 1024
SHARED = 512
TURNOVER = 4
DOCS = 64
CAPACITY_PER_REQUEST = 160
MASK = (1 << 64) - 1
PLANNED = ("loads_planned", "load_blocks", "stores_planned", "store_blocks")


def chain(parent, salt):
    x = (parent ^ (salt * 0x9E3779B97F4A7C15)) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


class Request:
    __slots__ = ("id", "serial", "doc", "num_tokens", "hashes", "hash_bytes", "blocks", "vllm")

    def __init__(self, serial, extra, hash_bytes=False):
        self.id = f"req-{serial}"
        self.serial = serial
        self.doc = serial % DOCS
        self.num_tokens = PROMPT + extra
        self.hashes = []
        # vLLM's block hashes (32 bytes) for the "vllm" and "r1" paths, next to the integers.
        self.hash_bytes = [] if hash_bytes else None
        self.blocks = []
        self.extend()
        # vLLM's Request for the "vllm" and "r1" paths: the same hash list, its counts kept in
        # step.
        self.vllm = v.Request(self.id, self.hashes if self.hash_bytes is None else
                              self.hash_bytes, self.num_tokens, 0, None)

    def extend(self):
        while (len(self.hashes) + 1) * BLOCK <= self.num_tokens:
            b = len(self.hashes)
            parent = self.hashes[-1] if self.hashes else 0x9E3779B9
            salt = (self.doc << 32) | b if b < SHARED // BLOCK else \
                ((self.serial << 20) ^ (b + 0xABCDEF)) + (1 << 62)
            self.hashes.append(chain(parent, salt))
            if self.hash_bytes is not None:
                self.hash_bytes.append(self.hashes[-1].to_bytes(32, "big"))


def bench_config(n):
    return kvconnect.Config(
        topology={"tensor_parallel": 1},
        kv_cache={"gpu_block_size": BLOCK, "layers": 1, "page_bytes": 4096},
        offload={"cpu_bytes_to_use": n * CAPACITY_PER_REQUEST * 4096},
        runtime={"job_timeout_ms": 0, "job_timeout_steps": 0})


class Calls:
    """Times only the connector's calls (perf_counter_ns around each), not the engine stand-in's
    work of building their arguments; by_call sums each call's time apart (--by-call).
    hash_bytes: whether the requests carry vLLM's bytes block hashes; kv_events: whether the
    connectors record KV events (--kv-events)."""

    hash_bytes = False
    kv_events = False

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


class KvconnectCalls(Calls):
    """kvconnect's scheduler (self.sc): each job's result goes back, successful, through
    apply_job_results the step after the job was planned."""

    def __init__(self):
        super().__init__()
        self.pending = []  # (job id, kind, ok) of the last metadata

    def planned(self, meta):
        self.pending = [(j.id, "load", True) for j in meta.loads] + \
            [(j.id, "store", True) for j in meta.stores]
        return meta

    def complete(self, step):
        self.timed(self.sc.apply_job_results, step, self.pending)
        self.pending = []

    def stats(self):
        return {k: self.sc.stats()[k] for k in PLANNED}

    def shutdown(self):
        self.sc.shutdown()


class TupleCalls(KvconnectCalls):
    """The connector calls through kvconnect.SchedulerConnector, requests as tuples."""

    def __init__(self, n, instance):
        super().__init__()
        self.sc = kvconnect.SchedulerConnector(bench_config(n), instance=instance, token="bench",
                                               listen=False, transport="memory",
                                               kv_events=self.kv_events)

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
        self.planned(self.timed(self.sc.build_connector_meta, step, fresh, cached, []))

    def finished(self, r):
        self.timed(self.sc.request_finished, r.id)

    def output(self):
        return self.timed(self.sc.update_connector_output).finished_recving

    def events(self):
        self.timed(self.sc.take_events)


class VllmObjects:
    """The engine stand-in's side of a vLLM connector: vLLM's objects (the stand-ins), built
    untimed as vLLM's scheduler builds them, and the calls that take them."""

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

    @staticmethod
    def scheduler_output(fresh, cached):
        return v.SchedulerOutput(
            [v.NewRequestData(rid, (blocks,), c) for rid, _, blocks, c in fresh],
            v.CachedRequestData([rid for rid, _, _, _ in cached], set(),
                                [None if b is None else (b,) for _, _, b, _ in cached],
                                [c for _, _, _, c in cached]),
            {rid: n for rid, n, _, _ in cached + fresh}, set(), [])

    def finished(self, r):
        self.timed(self.connector.request_finished, r.vllm, r.blocks)


class VllmCalls(VllmObjects, KvconnectCalls):
    """The connector calls through kvconnect.vllm.KvconnectConnector, with vLLM's objects (its
    block hashes 32-byte strings, as vLLM's and the r1 path's)."""

    hash_bytes = True

    def __init__(self, n, instance):
        super().__init__()
        extra = {"cpu_bytes_to_use": n * CAPACITY_PER_REQUEST * 4096,
                 "runtime": {"instance": instance, "token": "bench", "job_timeout_ms": 0,
                             "job_timeout_steps": 0}}
        config = v.vllm_config(extra, instance, BLOCK)
        config.kv_events_config.enable_kv_cache_events = self.kv_events
        self.connector = KvconnectConnector(config, KVConnectorRole.SCHEDULER,
                                            v.kv_cache_config(1 << 20, 4096, BLOCK))
        self.sc = self.connector.scheduler

    def build(self, step, fresh, cached):
        self.timed(self.connector.build_connector_meta, self.scheduler_output(fresh, cached))
        self.planned(self.connector.planned)

    def output(self):
        out = v.KVConnectorOutput()
        self.timed(self.connector.update_connector_output, out)
        return out.finished_recving or ()

    def events(self):
        self.timed(self.connector.take_events)


class R1Calls(VllmObjects, Calls):
    """The baseline: vLLM R1's OffloadingConnector in Python (reference_connector), with the same
    objects, on the settings kvconnect gets (one KV-cache group of BLOCK-token blocks, factor 1,
    the same CPU blocks, LRU, no reuse filter, prefix caching; events as kv_events). Its transfers
    complete through update_connector_output the step after they were planned; the planned
    counts are read off the metadata, untimed."""

    hash_bytes = True

    def __init__(self, n, instance):
        super().__init__()
        self.connector = self.make_connector(n)
        self.finished_sending = set()
        self.finished_recving = set()
        self.counts = dict.fromkeys(PLANNED, 0)

    def make_connector(self, n):
        return rc.OffloadingConnector(rc.OffloadingSpec(
            gpu_block_size=(BLOCK,), block_size_factor=1, hash_block_size=BLOCK,
            num_cpu_blocks=n * CAPACITY_PER_REQUEST, enable_events=self.kv_events))

    def build(self, step, fresh, cached):
        meta = self.timed(self.connector.build_connector_meta,
                          self.scheduler_output(fresh, cached))
        self.finished_recving = set(meta.reqs_to_load)
        self.finished_sending = set(meta.reqs_to_store)
        self.counts["loads_planned"] += len(meta.reqs_to_load)
        self.counts["load_blocks"] += sum(len(cpu.block_ids)
                                          for cpu, _ in meta.reqs_to_load.values())
        self.counts["stores_planned"] += len(meta.reqs_to_store)
        self.counts["store_blocks"] += sum(len(cpu.block_ids)
                                           for _, cpu in meta.reqs_to_store.values())

    def complete(self, step):
        pass  # R1 hears of finished transfers in update_connector_output only

    def output(self):
        out = v.KVConnectorOutput(self.finished_sending, self.finished_recving)
        self.finished_sending, self.finished_recving = set(), set()
        self.timed(self.connector.update_connector_output, out)
        return out.finished_recving

    def take_events(self):
        """R1's take_events is a generator: vLLM's scheduler drains it (list())."""
        return list(self.connector.take_events())

    def events(self):
        self.timed(self.take_events)

    def stats(self):
        return dict(self.counts)

    def shutdown(self):
        pass


class R1SourceCalls(R1Calls):
    """vLLM R1's own connector (path r1_source): vLLM's scheduler and CPU manager from the source
    tree given to load() (--vllm-source), called as R1Calls calls the re-write."""

    modules = None  # vllm_r1_source.load's

    @classmethod
    def load(cls, source):
        """vLLM's modules from `source`; RuntimeError when it is not vLLM's source at R1."""
        from kvconnect.vllm import BlockRemoved, BlockStored
        cls.modules = vllm_r1_source.load(source, BlockStored, BlockRemoved)

    def make_connector(self, n):
        modules = R1SourceCalls.modules
        return vllm_r1_source.connector(modules, vllm_r1_source.Spec(
            modules, BLOCK, n * CAPACITY_PER_REQUEST, self.kv_events))


PATHS = {"tuples": TupleCalls, "vllm": VllmCalls, "r1": R1Calls, "r1_source": R1SourceCalls}
BASELINES = ("r1", "r1_source")  # vLLM R1's connector: the re-write, vLLM's own source


class Bench:
    def __init__(self, n, instance, path="tuples"):
        self.n = n
        self.calls = PATHS[path](n, instance)
        self.closed = False
        self.step_no = 0
        self.serial = 0
        self.next_gpu = 1
        self.running = []
        self.waiting = []
        self.loading = {}
        self.promoted = []

    def alloc(self, r):
        while len(r.blocks) * BLOCK < r.num_tokens:
            r.blocks.append(self.next_gpu)
            self.next_gpu = 1 if self.next_gpu >= (1 << 31) else self.next_gpu + 1

    def populate(self):
        calls = self.calls
        for i in range(self.n):
            r = Request(self.serial, i % BLOCK, calls.hash_bytes)
            self.serial += 1
            calls.match(r, 0)
            self.alloc(r)
            self.step_no += 1
            calls.build(self.step_no, [calls.scheduled(r, 0, r.num_tokens, r.blocks)], [])
            calls.events()
            calls.complete(self.step_no)
            calls.output()
            r.num_tokens += 1
            r.extend()
            self.running.append(r)

    def step(self):
        """One engine step; returns the microseconds its connector calls took."""
        calls = self.calls
        before = calls.ns
        calls.complete(self.step_no)
        for rid in calls.output():
            r = self.loading.pop(rid, None)
            if r is not None:
                self.promoted.append(r)

        for _ in range(min(TURNOVER, len(self.running))):
            calls.finished(self.running.pop(0))
        for _ in range(TURNOVER):
            self.waiting.append(Request(self.serial, 0, calls.hash_bytes))
            self.serial += 1

        fresh, owners = [], []
        for r in self.promoted:
            # vLLM asks no lookup of a request whose num_computed_tokens is not 0 (its load
            # set them), and calls update_state_after_alloc for every request it schedules
            # from the waiting queue.
            self.alloc(r)
            calls.alloc(r, 0)
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
            calls.alloc(r, tokens)
            if tokens > 0:
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
        calls.build(self.step_no, fresh, cached)
        calls.events()
        for r in self.running:
            r.num_tokens += 1
            r.extend()
        for r in owners:
            r.num_tokens += 1
            r.extend()
            self.running.append(r)
        return (calls.ns - before) / 1000.0

    def start(self):
        """The requests admitted and the workload at its steady state, before the timed steps."""
        self.populate()
        for _ in range(self.n // TURNOVER + 64):
            self.step()
        self.calls.by_call = {}
        self.before = self.calls.stats()

    def finish(self):
        """The transfers planned over the timed steps; the connector shut down."""
        after = self.calls.stats()
        self.close()
        return {k: after[k] - self.before[k] for k in PLANNED}

    def close(self):
        """Shuts the connector down (its segment removed), once."""
        if not self.closed:
            self.closed = True
            self.calls.shutdown()

    def run(self, steps):
        try:
            self.start()
            out = [self.step() for _ in range(steps)]
            return out, self.finish()
        finally:
            self.close()

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


class PathProcess:
    """One path's Bench in a child process of its own (--interleave): set up, then driven a few
    timed steps at a time over a pipe (this script with --serve), so that every path meets the
    same phases of the host without sharing a process, and caches, with another path."""

    def __init__(self, args, n, path, instance):
        cmd = [sys.executable, __file__, args.kvconnect, "--serve", path, "--requests", str(n),
               "--instance", instance]
        if args.kv_events:
            cmd.append("--kv-events")
        if args.vllm_source:
            cmd += ["--vllm-source", args.vllm_source]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.by_call = {}

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"python_scheduler_bench: a path's process ended "
                               f"(exit {self.proc.wait()})")
        return json.loads(line)

    def _ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def wait_ready(self):
        self._reply()

    def steps(self, k):
        return self._ask(f"steps {k}")

    def finish(self):
        out = self._ask("finish")
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            raise RuntimeError("python_scheduler_bench: a path's process failed")
        self.by_call = out["by_call_us"]
        return out["planned"]

    def by_call_us(self, steps):
        return self.by_call

    def close(self):
        """Ends the process if it still runs (SIGTERM: it shuts its connector down)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def serve(args):
    """--serve PATH: one path's Bench, set up, then driven from stdin (PathProcess): "steps K"
    answers the K steps' µs, "finish" the planned transfers and each call's µs a step. The end
    of stdin (the driver gone), SIGTERM (its close()) or an error end it with its connector shut
    down; SIGINT is the driver's to act on."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bench = Bench(int(args.requests), args.instance, args.serve)
    try:
        bench.start()
        print(json.dumps("ready"), flush=True)
        done = 0
        for command in sys.stdin:
            word, *rest = command.split()
            if word == "steps":
                k = int(rest[0])
                done += k
                print(json.dumps([bench.step() for _ in range(k)]), flush=True)
            elif word == "finish":
                planned = bench.finish()
                print(json.dumps({"planned": planned,
                                  "by_call_us": bench.by_call_us(max(done, 1))}), flush=True)
                return 0
            else:
                raise ValueError(f"--serve: unknown command {command!r}")
        return 1
    finally:
        bench.close()


def cxx_planner_us(kvconnect_bin, n, steps):
    """`kvconnect bench planner`'s mean µs a step for n requests (one round)."""
    out = subprocess.run([kvconnect_bin, "bench", "planner", "--requests", str(n),
                          "--steps", str(steps), "--rounds", "1"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["us_per_step"]


def spread(values):
    """min, median, max of `values`, rounded."""
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2),
            "max": round(max(values), 2)}


def run_round(args, n, paths, tag, rnd):
    """One round at n requests: the C++ planner and every path, in an order that alternates
    between rounds (the C++ planner first in odd rounds, last in even ones), so that both meet
    the same phases of a noisy host. Returns the paths' JSON lines, or None when two paths
    planned different work."""
    cxx_first = rnd % 2 == 1
    cxx_us = cxx_planner_us(args.kvconnect, n, args.steps) if cxx_first else None
    order = paths if rnd % 2 == 1 else paths[::-1]
    runs = {}
    if args.interleave:  # each path in a process of its own, args.interleave steps in turn
        procs = {}
        try:
            for path in order:
                procs[path] = PathProcess(args, n, path, f"{tag}-{n}-{path}-{rnd}")
            for proc in procs.values():
                proc.wait_ready()
            step_us = {path: [] for path in order}
            for turn, at in enumerate(range(0, args.steps, args.interleave)):
                k = min(args.interleave, args.steps - at)
                for path in (order if turn % 2 == 0 else order[::-1]):
                    step_us[path] += procs[path].steps(k)
            for path, proc in procs.items():
                runs[path] = (step_us[path], proc.finish(), proc)
        finally:  # an error or a signal here: no path's process outlives the round
            for proc in procs.values():
                proc.close()
    else:
        for path in order:
            bench = Bench(n, f"{tag}-{n}-{path}-{rnd}", path)
            step_us, planned = bench.run(args.steps)
            runs[path] = (step_us, planned, bench)
    if not cxx_first:
        cxx_us = cxx_planner_us(args.kvconnect, n, args.steps)
    lines, means = {}, {}
    for path, (step_us, planned, bench) in runs.items():
        means[path] = mean = statistics.fmean(step_us)
        s = sorted(step_us)
        lines[path] = line = {
            "bench": "python_scheduler", "path": path, "requests": n, "round": rnd,
            "kv_events": args.kv_events,
            "steps": len(s), "us_per_step": round(mean, 2), "p50_us": round(s[len(s) // 2], 2),
            "p99_us": round(s[int(0.99 * len(s))], 2), "cxx_planner_us_per_step": cxx_us,
            "ratio_to_cxx": round(mean / cxx_us, 2), **planned}
        if args.by_call:
            line["by_call_us"] = bench.by_call_us(args.steps)
    for base in BASELINES:
        if base in means and "vllm" in means:
            lines["vllm"][f"{base}_over_vllm"] = round(means[base] / means["vllm"], 2)
    base = next((b for b in BASELINES if b in runs), None)
    if base is not None:
        for path, (_, planned, _) in runs.items():
            if planned != runs[base][1]:
                print(f"python_scheduler_bench: {n} requests: {base} planned {runs[base][1]}, "
                      f"{path} planned {planned}: not the same work", file=sys.stderr)
                return None
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvconnect")
    ap.add_argument("--requests", default="64,256,1024")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--path", default="tuples,vllm,r1")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds per request count, the C++ planner run in each (alternated)")
    ap.add_argument("--by-call", action="store_true",
                    help="also give each connector call's µs per step")
    ap.add_argument("--kv-events", action="store_true",
                    help="KV events on (vLLM's kv_events_config): recorded and taken every step")
    ap.add_argument("--interleave", type=int, default=0, metavar="K",
                    help="run the paths side by side, each in a process of its own, K timed "
                         "steps of each in turn (the order reversed every turn), so that all "
                         "meet the same phases of the host; 0: one path after the other")
    ap.add_argument("--serve", metavar="PATH", help=argparse.SUPPRESS)  # PathProcess's child
    ap.add_argument("--instance", help=argparse.SUPPRESS)
    ap.add_argument("--vllm-source", metavar="DIR",
                    help="a vLLM source tree at R1 (a269744e9f): path r1_source runs its "
                         "connector")
    args = ap.parse_args()
    Calls.kv_events = args.kv_events
    # SIGTERM ends the run through its finally blocks: every connector shut down, every path's
    # process ended.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    counts = [int(x) for x in args.requests.split(",")]
    paths = [args.serve] if args.serve else args.path.split(",")
    if not paths or any(p not in PATHS for p in paths):
        ap.error("--path: tuples, vllm, r1, r1_source or several, comma-separated")
    vllm_r1_source.check_argument(ap, paths, args.vllm_source)
    if "r1_source" in paths:
        R1SourceCalls.load(args.vllm_source)
    if args.serve:
        return serve(args)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.interleave < 0:
        ap.error("--interleave must be 0 or more")
    tag = f"bench-py-{os.getpid()}"
    print(json.dumps({"bench": "python_call", **call_cost_ns(tag + "-call")}))
    for n in counts:
        rounds = []
        for rnd in range(1, args.rounds + 1):
            lines = run_round(args, n, paths, tag, rnd)
            if lines is None:
                return 1
            for path in paths:
                print(json.dumps(lines[path]), flush=True)
            rounds.append(lines)
        if args.rounds > 1:  # the spread over the rounds, of each round's own ratios
            summary = {"bench": "python_scheduler_rounds", "requests": n, "rounds": args.rounds,
                       "cxx_planner_us_per_step": spread(
                           [r[paths[0]]["cxx_planner_us_per_step"] for r in rounds])}
            for path in paths:
                summary[path] = {"us_per_step": spread([r[path]["us_per_step"] for r in rounds]),
                                 "ratio_to_cxx": spread([r[path]["ratio_to_cxx"] for r in rounds])}
            for base in BASELINES:
                if base in paths and "vllm" in paths:
                    key = f"{base}_over_vllm"
                    summary[key] = spread([r["vllm"][key] for r in rounds])
            print(json.dumps(summary), flush=True)
    return 0

if __name__ == "__main__":
    sys.exit(main())
