"""A small vLLM engine for kvconnect.vllm's end-to-end tests: worker processes (TP=2) that build
the worker-role KvconnectConnector and register CPU torch tensors as their KV caches (the sim
backend adopts them), and the calls vLLM's engine makes each step, in vLLM's order, with each
step's metadata shipped to the workers pickled (as vLLM's SchedulerOutput carries it) and vLLM's
aggregation of the workers' finished sets.

The workers' "forward" is finish_transfers(): every transfer submitted so far has finished when
it returns, so each step's outcome is known without waiting on time (a rank told to hold skips
it: a copy held by a delay_copy fault then stays in flight). Messages to and from the worker
processes are waited for with a deadline (a worker that died fails the test).

vLLM's scheduler is played for the requests waiting for their KV (KvWaits), in
Scheduler.update_from_output's order: the output's invalid_block_ids first, then the
connector's update_connector_output, then the finished sets. It fails the test where vLLM would
silently go wrong: invalid block ids the connector adds in update_connector_output (vLLM never
reads them), or a request released to run on KV that a rank has not finished loading.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
import multiprocessing
import os
import pickle
import socket
import threading
from pathlib import Path

import torch

import vllm_standins as v
from kvconnect.vllm import KVConnectorRole, KvconnectConnector, KvconnectConnectorMetadata

BLOCK = 4  # tokens per GPU block (= offloaded block = hash block)
NUM_BLOCKS = 8  # GPU blocks per rank; block 0 is vLLM's null block
LAYERS = 2
HEADS, HEAD_DIM = 2, 8  # per rank
TP = 2
REPLY_S = 60.0  # deadline of one worker reply


@dataclass(frozen=True)
class Shape:
    """The engine's parallelism: `tp` ranks per PP stage and each stage's layers (vLLM's split
    of the model's layers); by default TP ranks of one stage of LAYERS layers."""
    tp: int = TP
    stages: tuple[int, ...] = (LAYERS,)

    @property
    def world(self) -> int:
        return self.tp * len(self.stages)

    def layers_of(self, rank: int) -> int:
        return self.stages[rank // self.tp]


ONE_STAGE = Shape()


def page_bytes() -> int:
    return 2 * BLOCK * HEADS * HEAD_DIM * 2  # K and V of one block of one layer, fp16


def kv_cache_config(layers: int = LAYERS) -> v.KVCacheConfig:
    return v.kv_cache_config(NUM_BLOCKS, page_bytes(), BLOCK, layers=layers)


def extra_config(**runtime) -> dict:
    """16 CPU blocks; no deadline by time unless `runtime` sets one."""
    return {"cpu_bytes_to_use": 16 * TP * LAYERS * page_bytes(),
            "runtime": {"job_timeout_ms": 0, **runtime}}


def tier_extra_config(root_dir: Path, pool_blocks: int) -> dict:
    """A CPU pool of `pool_blocks` blocks and a file tier under `root_dir` (1 MiB per rank), as a
    deployment writes them in kv_connector_extra_config: vLLM's key beside kvconnect's offload
    section."""
    tier = {"type": "fs", "root_dir": str(root_dir), "capacity_bytes": 1 << 20}
    return {"cpu_bytes_to_use": pool_blocks * TP * LAYERS * page_bytes(),
            "offload": {"secondary_tiers": [tier]},
            "runtime": {"job_timeout_ms": 0}}


def vllm_config(extra: dict, engine_id: str, rank: int | None = None,
                shape: Shape = ONE_STAGE) -> v.VllmConfig:
    config = v.vllm_config(extra, engine_id, BLOCK, tp=shape.tp, pp=len(shape.stages),
                           num_layers=sum(shape.stages))
    if rank is not None:
        config.parallel_config.rank = rank
    return config


def free_port() -> int:
    """A loopback port no socket holds now (a port a config must fix)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def segment_path(engine_id: str) -> Path:
    """The node's segment both sides derive from the engine id and the DP rank (0)."""
    return Path("/dev/shm") / f"kvc-{os.getuid()}-vllm-{engine_id}-dp0-node0"


def kv_tensors(layers: int = LAYERS) -> dict:
    """FlashAttention's layout per layer: (2 for K and V, blocks, block size, heads, head_dim)."""
    return {f"layer{i}": torch.zeros((2, NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM), dtype=torch.float16)
            for i in range(layers)}


def cross_layer_kv_cache() -> tuple[torch.Tensor, dict]:
    """vLLM's cross-layer KV cache for a backend with FlashAttention's order
    (allocate_uniform_kv_caches, R1): one buffer in the physical order (blocks, layers, K/V,
    block size, heads, head_dim), and each layer's view of it in its logical shape."""
    backend = v.FlashAttentionBackend
    shape = (LAYERS,) + backend.get_kv_cache_shape(NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM)
    order = backend.get_kv_cache_stride_order(include_num_layers_dimension=True)
    cross = torch.zeros(NUM_BLOCKS * LAYERS * page_bytes(), dtype=torch.int8) \
        .view(torch.float16).view(tuple(shape[i] for i in order))
    layers = cross.permute(*[order.index(i) for i in range(len(order))])
    return cross, {f"layer{i}": layers[i] for i in range(LAYERS)}


def worker_main(conn, engine_id: str, rank: int, extra: dict, cross_layers: bool,
                shape: Shape) -> None:
    """One GPU worker process: its connector and KV cache (its stage's layers; per layer, or
    vLLM's cross-layer one: `cross_layers`), then the steps the engine sends."""
    layers = shape.layers_of(rank)
    c = KvconnectConnector(vllm_config(extra, engine_id, rank, shape), KVConnectorRole.WORKER,
                           kv_cache_config(layers))
    if cross_layers:
        assert c.prefer_cross_layer_blocks
        cross, kv = cross_layer_kv_cache()
        c.register_cross_layers_kv_cache(cross, v.FlashAttentionBackend)
    else:
        kv = kv_tensors(layers)
        c.register_kv_caches(kv)
    conn.send("ready")
    try:
        while True:
            op, args = conn.recv()
            if op == "stop":
                break
            if op == "write":  # the forward computed these blocks for content `tag`
                blocks, tag = args
                for b in blocks:
                    for i, t in enumerate(kv.values()):
                        t[:, b] = float(tag * 10 + i + rank * 1000)
                conn.send(None)
            elif op == "read":
                conn.send({b: [t[:, b].numpy().tobytes() for t in kv.values()] for b in args})
            elif op == "step":
                meta, finished, hold = pickle.loads(args)
                c.bind_connector_metadata(meta)
                c.handle_preemptions(meta)
                c.start_load_kv(None)
                if not hold:
                    c.worker.finish_transfers()  # the forward: every transfer so far has finished
                c.wait_for_save()
                sending, recving = c.get_finished(finished)
                errors = c.get_block_ids_with_load_errors()
                stats = c.get_kv_connector_stats()  # pickled to the engine, as vLLM's are
                c.clear_connector_metadata()
                conn.send((sending, recving, errors, stats))
            elif op == "tables":
                w = c.worker
                conn.send((w.jobs_known, w.tracked_requests, w.transfers_in_flight))
            elif op == "faults":
                conn.send(c.worker.injected_faults)
    finally:
        c.shutdown()
        conn.send("stopped")


class KvWaits:
    """vLLM's Scheduler for the requests waiting for their KV (WAITING_FOR_REMOTE_KVS), in the
    order of Scheduler.update_from_output (R1 and main): _handle_invalid_blocks marks a waiting
    request with one of its blocks among the output's invalid_block_ids to be recomputed; then
    _update_from_kv_xfer_finished calls the connector's update_connector_output and releases
    each request its finished_recving names (recomputed if marked, else run on its loaded
    blocks). Beyond vLLM it checks that the connector adds no invalid block id in
    update_connector_output (read by nobody) and that a request released to run was named
    loaded by every rank (its load's copies all ended)."""

    def __init__(self, world: int):
        self.world = world
        self.loading: dict[str, tuple[set[int], set[int]]] = {}  # id -> (blocks, ranks done)
        self.marked: set[str] = set()  # to recompute once released
        self.ran: list[str] = []  # released on their loaded blocks, in order
        self.recomputed: list[str] = []  # released to recompute, in order

    def planned(self, loads) -> None:
        for job in loads:
            self.loading[job.request_id] = (set(job.gpu_blocks), set())

    def reported(self, results: list) -> None:
        """The workers' step results: which rank named which request in finished_recving."""
        for rank, (_, recving, *_) in enumerate(results):
            for req_id in recving:
                if req_id in self.loading:
                    self.loading[req_id][1].add(rank)

    def handle_invalid_blocks(self, invalid: set[int]) -> None:
        hit = set()
        for req_id, (blocks, _) in self.loading.items():
            if blocks & invalid:
                self.marked.add(req_id)
                hit |= blocks & invalid
        assert invalid <= hit, f"invalid block ids {sorted(invalid - hit)} of no waiting request"

    def release(self, finished_recving) -> None:
        for req_id in sorted(finished_recving or ()):
            assert req_id in self.loading, f"{req_id} released but not waiting for its KV"
            _, ranks = self.loading.pop(req_id)
            if req_id in self.marked:
                self.marked.discard(req_id)
                self.recomputed.append(req_id)
                continue
            missing = sorted(set(range(self.world)) - ranks)
            assert not missing, f"{req_id} runs on KV rank(s) {missing} did not finish loading"
            self.ran.append(req_id)

    def update_from_output(self, sched: KvconnectConnector, kv_out: v.KVConnectorOutput) -> None:
        read = set(kv_out.invalid_block_ids or ())
        self.handle_invalid_blocks(read)
        sched.update_connector_output(kv_out)
        added = set(kv_out.invalid_block_ids or ()) - read
        assert not added, f"invalid block ids {sorted(added)} added after vLLM read them"
        self.release(kv_out.finished_recving)


class FrontEnd:
    """vLLM's way for a connector's stats from a step's output to its front end, R1's: the
    Scheduler (update_from_output) adds the scheduler role's get_kv_connector_stats to the
    workers' when they sent some, and make_stats ships their `data`, serialised (JSON here:
    plain lists and numbers, as msgspec's encoding needs), to the front end, whose
    KVConnectorLogging rebuilds them with the connector class's build_kv_connector_stats and
    accumulates them (`logged`, what its log line reduces), and whose KVConnectorProm feeds them
    to the class's build_prom_metrics (`metrics`: the series made, by name)."""

    LABELS = ["model_name", "engine"]

    def __init__(self):
        metric_types, self.metrics = v.prom_metric_types()
        self.logged = None
        self.prom = KvconnectConnector.build_prom_metrics(None, metric_types, self.LABELS,
                                                          {0: ["m", "0"]})

    def step(self, sched: KvconnectConnector, kv_out: v.KVConnectorOutput) -> None:
        stats = kv_out.kv_connector_stats
        if stats and sched:
            own = sched.get_kv_connector_stats()
            if own:
                stats = stats.aggregate(own)
        if stats is None:
            return
        data = json.loads(json.dumps(stats.data))
        rebuilt = KvconnectConnector.build_kv_connector_stats(data)
        self.logged = rebuilt if self.logged is None else self.logged.aggregate(rebuilt)
        self.prom.observe(data, 0)


class WorkerThread(threading.Thread):
    """A worker in the engine's own process (vLLM's UniProcExecutor: the worker lives in the
    EngineCore process, beside the scheduler), with a process's exitcode."""

    def __init__(self, args: tuple):
        super().__init__(daemon=True)
        self.args = args
        self.exitcode: int | None = None

    def run(self) -> None:
        try:
            worker_main(*self.args)
            self.exitcode = 0
        except BaseException:
            self.exitcode = 1
            raise


class Workers:
    """TP worker processes (threads of this process with `in_process`), started at once;
    ready() waits for their connectors."""

    def __init__(self, engine_id: str, extra: dict, cross_layers: bool = False,
                 in_process: bool = False, shape: Shape = ONE_STAGE):
        ctx = multiprocessing.get_context("spawn")
        self.world = shape.world
        self.conns, self.procs = [], []
        # vLLM's KVOutputAggregator: per id, the workers that have not reported it yet.
        self.remaining: dict[str, dict[str, int]] = {"sending": {}, "recving": {}}
        self.kv_waits = KvWaits(self.world)
        self.front_end = FrontEnd()
        for rank in range(self.world):
            parent, child = ctx.Pipe()
            args = (child, engine_id, rank, extra, cross_layers, shape)
            p = WorkerThread(args) if in_process else \
                ctx.Process(target=worker_main, args=args, daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)

    def reply(self, rank: int):
        conn = self.conns[rank]
        if not conn.poll(REPLY_S):
            raise AssertionError(f"worker {rank} did not answer within {REPLY_S} s "
                                 f"(alive: {self.procs[rank].is_alive()})")
        return conn.recv()

    def ready(self) -> None:
        assert [self.reply(r) for r in range(self.world)] == ["ready"] * self.world

    def aggregate(self, results: list) -> v.KVConnectorOutput:
        """vLLM's KVOutputAggregator over one step's (sending, recving, load errors, stats): an
        id is finished once every worker reported it (in this step or earlier ones); load errors
        are the union; the first worker's stats take the others' (aggregate)."""
        finished = {}
        for i, which in enumerate(("sending", "recving")):
            remaining = self.remaining[which]
            done = set()
            for report in results:
                for req_id in report[i]:
                    left = remaining.get(req_id, self.world) - 1
                    if left == 0:
                        remaining.pop(req_id, None)
                        done.add(req_id)
                    else:
                        remaining[req_id] = left
            finished[which] = sorted(done)
        stats = None
        for _, _, _, rank_stats in results:
            if stats is None:
                stats = rank_stats
            elif rank_stats is not None:
                assert isinstance(stats, type(rank_stats))
                stats = stats.aggregate(rank_stats)
        return v.KVConnectorOutput(finished["sending"], finished["recving"],
                                   set().union(*(r[2] for r in results)), stats or None)

    def all(self, op: str, args=None) -> list:
        return self.each(op, [args] * self.world)

    def each(self, op: str, args: list) -> list:
        """`op` on every rank r with args[r]."""
        for conn, a in zip(self.conns, args):
            conn.send((op, a))
        return [self.reply(r) for r in range(self.world)]

    def stop(self) -> None:
        for rank, (conn, p) in enumerate(zip(self.conns, self.procs)):
            if p.is_alive():
                conn.send(("stop", None))
                assert self.reply(rank) == "stopped"
            p.join(REPLY_S)
            if p.is_alive():
                assert not isinstance(p, WorkerThread), f"worker thread {rank} did not end"
                p.kill()
                p.join()
        assert all(p.exitcode == 0 for p in self.procs), [p.exitcode for p in self.procs]


def scheduler(engine_id: str, extra: dict, shape: Shape = ONE_STAGE) -> KvconnectConnector:
    """The scheduler role; vLLM gives it worker 0's kv_cache_config (stage 0's layers)."""
    return KvconnectConnector(vllm_config(extra, engine_id, shape=shape),
                              KVConnectorRole.SCHEDULER, kv_cache_config(shape.stages[0]))


@contextlib.contextmanager
def engine(engine_id: str, extra: dict, cross_layers: bool = False, in_process: bool = False,
           shape: Shape = ONE_STAGE):
    """vLLM's order: the workers (TP ranks) build their connectors and register their KV caches
    (vLLM's cross-layer one with `cross_layers`; in this process with `in_process`) first, then
    the scheduler side is built; yields
    (scheduler side, workers). On the way out the scheduler side shuts down and the workers
    stop; after a body that raised nothing, the node's segment must be gone."""
    workers = Workers(engine_id, extra, cross_layers, in_process, shape)
    sched = None
    try:
        workers.ready()
        sched = scheduler(engine_id, extra, shape)
        yield sched, workers
    finally:
        if sched is not None:
            sched.shutdown()
        workers.stop()
    assert not segment_path(engine_id).exists()


def scheduler_that_dies(engine_id: str, extra: dict) -> None:
    """A process's scheduler role that publishes its port in the node's segment and ends
    without shutdown (a crash: none of its own cleanup runs)."""
    sched = scheduler(engine_id, extra)
    assert sched.scheduler.port != 0
    os._exit(0)  # with `sched` alive


def output(new=(), finished=()) -> v.SchedulerOutput:
    return v.SchedulerOutput([v.NewRequestData(r.request_id, (blocks,), r.num_computed_tokens)
                              for r, blocks in new],
                             v.CachedRequestData([], set(), [], []),
                             {r.request_id: r.num_tokens for r, _ in new}, set(finished), [])


def blocks_of(ids: list[int]) -> v.KVCacheBlocks:
    return v.KVCacheBlocks(([v.KVCacheBlock(b, None, False) for b in ids],))


def engine_step(sched: KvconnectConnector, workers: Workers, out: v.SchedulerOutput,
                wait: bool = True, hold: tuple[int, ...] = ()) -> v.KVConnectorOutput:
    """One step in vLLM's order: build_connector_meta, the workers' execute_model (bind, load,
    forward, save, get_finished, load errors, clear; the ranks in `hold` skip the forward's
    finish_transfers), vLLM's aggregation of their reports, then vLLM's update_from_output
    (KvWaits: invalid blocks, update_connector_output, whose answer replaces vLLM's sets, the
    released requests). With `wait`, the step's reports to kvconnect's coordinator are then
    waited for and applied (explicit synchronisation: vLLM's call takes what has arrived), and
    what they release is added to the sets, as vLLM's next call would bring it: finished sets
    only (vLLM reads invalid block ids before that call; none may come there)."""
    return finish_step(sched, workers, *schedule_step(sched, workers, out, hold), wait)


def schedule_step(sched: KvconnectConnector, workers: Workers, out: v.SchedulerOutput,
                  hold: tuple[int, ...] = ()) -> tuple[KvconnectConnectorMetadata, list]:
    """A step's first half (engine_step): build_connector_meta and the workers' execute_model.
    Returns the metadata and the workers' reports, for finish_step."""
    meta = sched.build_connector_meta(out)
    workers.kv_waits.planned(sched.planned.loads)
    results = workers.each("step", [pickle.dumps((meta, out.finished_req_ids, r in hold))
                                    for r in range(workers.world)])
    return meta, results


def finish_step(sched: KvconnectConnector, workers: Workers, meta: KvconnectConnectorMetadata,
                results: list, wait: bool = True) -> v.KVConnectorOutput:
    """A step's second half (engine_step): vLLM's aggregation of the workers' reports and its
    update_from_output; with `wait`, the step's reports to the coordinator waited for."""
    workers.kv_waits.reported(results)
    kv_out = workers.aggregate(results)
    workers.kv_waits.update_from_output(sched, kv_out)
    workers.front_end.step(sched, kv_out)
    if wait:
        late = sched.scheduler.update_connector_output(step=meta.step, timeout=REPLY_S)
        assert not late.invalid_block_ids, \
            f"invalid block ids {late.invalid_block_ids} only update_connector_output gives"
        workers.kv_waits.release(late.finished_recving)
        kv_out.finished_sending = set(kv_out.finished_sending or ()) | \
            set(late.finished_sending) or None
        kv_out.finished_recving = set(kv_out.finished_recving or ()) | \
            set(late.finished_recving) or None
    return kv_out


def prefix_hashes(n: int = 4) -> list[bytes]:
    return [(100 + i).to_bytes(8, "big") for i in range(n)]


def store_request(sched: KvconnectConnector, workers: Workers, req_id: str, hashes: list[bytes],
                  tag: int, wait: bool = True) -> tuple[list[int], list]:
    """Two steps: the request (one GPU block per hash) is computed into GPU blocks 1.. with
    content `tag` and its blocks stored; once every rank reported the stores vLLM frees its
    blocks and the GPU cache reuses them (overwritten). Returns its blocks and their bytes on
    each rank as computed. `wait`: engine_step's, for the second step."""
    r = v.Request(req_id, hashes, BLOCK * len(hashes), 0, None)
    assert sched.get_num_new_matched_tokens(r, 0) == (0, False)
    blocks = list(range(1, len(hashes) + 1))
    sched.update_state_after_alloc(r, blocks_of(blocks), 0)
    workers.all("write", (blocks, tag))
    engine_step(sched, workers, output(new=[(r, blocks)]))
    assert [j.gpu_blocks for j in sched.planned.stores] == [blocks]
    stored = workers.all("read", blocks)
    r.num_computed_tokens = r.num_tokens
    assert sched.request_finished(r, blocks) == (True, None)
    assert engine_step(sched, workers, output(finished=[req_id]), wait).finished_sending == \
        {req_id}
    workers.all("write", (blocks, 99))
    return blocks, stored


def store_a(sched: KvconnectConnector, workers: Workers,
            wait: bool = True) -> tuple[list[int], list]:
    """Steps 1-2: request a (16 tokens) is computed into GPU blocks 1-4 and its blocks stored
    (store_request)."""
    return store_request(sched, workers, "a", prefix_hashes(), 1, wait)


def start_b(sched: KvconnectConnector, workers: Workers, wait: bool = True,
            hold: tuple[int, ...] = ()) -> tuple[v.KVConnectorOutput, list[int], v.Request]:
    """Step 3: b shares a's 16 tokens: loaded into other blocks, in another order. Returns the
    step's output, b's blocks and b (not finished). `wait`, `hold`: engine_step's."""
    b = v.Request("b", prefix_hashes() + [(200).to_bytes(8, "big")], 20, 0, None)
    assert sched.get_num_new_matched_tokens(b, 0) == (16, True)
    blocks_b = [4, 3, 2, 1, 5]
    sched.update_state_after_alloc(b, blocks_of(blocks_b), 16)
    kv_out = engine_step(sched, workers, output(), wait, hold)
    assert [j.gpu_blocks for j in sched.planned.loads] == [blocks_b[:4]]
    return kv_out, blocks_b, b


def load_b(sched: KvconnectConnector, workers: Workers) -> tuple[v.KVConnectorOutput, list[int]]:
    """Step 3: start_b, then b finishes. Returns the step's output and b's blocks."""
    kv_out, blocks_b, b = start_b(sched, workers)
    assert sched.request_finished(b, blocks_b) == (False, None)
    return kv_out, blocks_b


def check_loaded(workers: Workers, blocks_a: list[int], stored: list,
                 blocks_b: list[int]) -> None:
    """Every rank's blocks_b hold what a stored in blocks_a."""
    loaded = workers.all("read", blocks_b[:len(blocks_a)])
    for r in range(workers.world):
        for src, dst in zip(blocks_a, blocks_b):
            assert loaded[r][dst] == stored[r][src], f"rank {r}: block {dst}"


def check_nothing_left(sched: KvconnectConnector, workers: Workers,
                       straggling: int = 0) -> None:
    """No job, request or transfer left on either side. `straggling`: jobs the coordinator
    failed at their deadline, whose entries wait (a bounded time, its straggler grace) for the
    late report to recognise it."""
    assert workers.remaining == {"sending": {}, "recving": {}}
    assert (workers.kv_waits.loading, workers.kv_waits.marked) == ({}, set())
    assert sched.scheduler.jobs_in_flight == 0
    tables = sched.scheduler.tables()
    assert {k: tables[k] for k in ("requests", "jobs", "loads", "tier_jobs", "promoting",
                                   "coordinator_jobs", "channel_queued_steps")} == \
        {"requests": 0, "jobs": 0, "loads": 0, "tier_jobs": 0, "promoting": 0,
         "coordinator_jobs": straggling, "channel_queued_steps": 0}
    assert workers.all("tables") == [(0, 0, 0)] * workers.world


def load_b_checked(sched: KvconnectConnector, workers: Workers, blocks_a: list[int],
                   stored: list) -> None:
    """b loads a's prefix (load_b); it must finish receiving with no invalid block, and every
    rank's loaded blocks must equal what a stored (check_loaded)."""
    kv_out, blocks_b = load_b(sched, workers)
    assert kv_out.finished_recving == {"b"}
    assert not kv_out.invalid_block_ids
    check_loaded(workers, blocks_a, stored, blocks_b)
