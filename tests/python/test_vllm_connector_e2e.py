"""kvconnect.vllm.KvconnectConnector end to end across processes: the parent builds the
scheduler role; two worker processes (TP=2) build their worker-role connectors and register CPU
torch tensors as their KV caches (the sim backend adopts them). A small engine loop makes the
calls in vLLM's per-step order, shipping each step's metadata to the workers pickled (as vLLM's
SchedulerOutput carries it), with a GPU cache too small to keep a finished request's blocks: the
blocks one request stored are loaded into other blocks for the next request sharing its prefix,
and every loaded byte equals what was stored, on each rank. Nothing is left behind: no process,
no segment, no job.

Not vLLM's order of building: vLLM builds the workers first (docs/python.md, "Not yet"); here
the scheduler side exists first and the workers find it at runtime.port.

The workers' "forward" is finish_transfers(): every transfer submitted so far has finished when
it returns, so each step's outcome is known without waiting on time. Messages to and from the
worker processes are waited for with a deadline (a worker that died fails the test).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import vllm_standins as v  # noqa: E402
from kvconnect.vllm import KVConnectorRole, KvconnectConnector  # noqa: E402

BLOCK = 4  # tokens per GPU block (= offloaded block = hash block)
NUM_BLOCKS = 8  # GPU blocks per rank; block 0 is vLLM's null block
LAYERS = 2
HEADS, HEAD_DIM = 2, 8  # per rank
TP = 2
REPLY_S = 60.0  # deadline of one worker reply


def page_bytes() -> int:
    return 2 * BLOCK * HEADS * HEAD_DIM * 2  # K and V of one block of one layer, fp16


def kv_cache_config() -> v.KVCacheConfig:
    return v.kv_cache_config(NUM_BLOCKS, page_bytes(), BLOCK, layers=LAYERS)


def extra_config(port: int = 0) -> dict:
    return {"cpu_bytes_to_use": 16 * TP * LAYERS * page_bytes(),
            "runtime": {"job_timeout_ms": 0, "port": port}}


def worker_main(conn, engine_id: str, rank: int, port: int) -> None:
    """One GPU worker process: its connector and KV cache, then the steps the engine sends."""
    config = v.vllm_config(extra_config(port), engine_id, BLOCK, tp=TP)
    config.parallel_config.rank = rank
    # FlashAttention's layout per layer: (2 for K and V, blocks, block size, heads, head_dim).
    kv = {f"layer{i}": torch.zeros((2, NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM), dtype=torch.float16)
          for i in range(LAYERS)}
    c = KvconnectConnector(config, KVConnectorRole.WORKER, kv_cache_config())
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
                meta, finished = pickle.loads(args)
                c.bind_connector_metadata(meta)
                c.handle_preemptions(meta)
                c.start_load_kv(None)
                c.worker.finish_transfers()  # the forward: every transfer so far has finished
                c.wait_for_save()
                sending, recving = c.get_finished(finished)
                errors = c.get_block_ids_with_load_errors()
                c.clear_connector_metadata()
                conn.send((sending, recving, errors))
    finally:
        c.shutdown()
        conn.send("stopped")


class Workers:
    def __init__(self, engine_id: str, port: int):
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for rank in range(TP):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(child, engine_id, rank, port), daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)

    def reply(self, rank: int):
        conn = self.conns[rank]
        if not conn.poll(REPLY_S):
            raise AssertionError(f"worker {rank} did not answer within {REPLY_S} s "
                                 f"(alive: {self.procs[rank].is_alive()})")
        return conn.recv()

    def all(self, op: str, args=None) -> list:
        for conn in self.conns:
            conn.send((op, args))
        return [self.reply(r) for r in range(TP)]

    def stop(self) -> None:
        for rank, (conn, p) in enumerate(zip(self.conns, self.procs)):
            if p.is_alive():
                conn.send(("stop", None))
                assert self.reply(rank) == "stopped"
            p.join(REPLY_S)
            if p.is_alive():
                p.kill()
                p.join()
        assert all(p.exitcode == 0 for p in self.procs), [p.exitcode for p in self.procs]


def aggregate(reports: list[set[str]]) -> list[str]:
    """vLLM's KVOutputAggregator: an id is finished once every worker reported it."""
    return sorted(set.intersection(*reports))


def output(new=(), finished=()) -> v.SchedulerOutput:
    return v.SchedulerOutput([v.NewRequestData(r.request_id, (blocks,)) for r, blocks in new],
                             v.CachedRequestData([], set(), []),
                             {r.request_id: r.num_tokens for r, _ in new}, set(finished), [])


def blocks_of(ids: list[int]) -> v.KVCacheBlocks:
    return v.KVCacheBlocks(([v.KVCacheBlock(b, None, False) for b in ids],))


def test_two_worker_processes_load_what_was_stored_byte_exact_on_every_rank():
    engine_id = f"pytest-{os.getpid()}-e2e"
    sched = KvconnectConnector(v.vllm_config(extra_config(), engine_id, BLOCK, tp=TP),
                               KVConnectorRole.SCHEDULER, kv_cache_config())
    segment = Path("/dev/shm") / sched.scheduler.segment_name.lstrip("/")
    workers = None
    try:
        workers = Workers(engine_id, sched.scheduler.port)
        assert [workers.reply(r) for r in range(TP)] == ["ready"] * TP
        sched.scheduler.wait_for_workers(REPLY_S)

        def engine_step(out: v.SchedulerOutput) -> v.KVConnectorOutput:
            meta = sched.build_connector_meta(out)
            results = workers.all("step", pickle.dumps((meta, out.finished_req_ids)))
            assert all(not errors for _, _, errors in results)
            kv_out = v.KVConnectorOutput(aggregate([s for s, _, _ in results]),
                                         aggregate([r for _, r, _ in results]))
            sched.update_connector_output(kv_out)
            return kv_out

        hashes = [(100 + i).to_bytes(8, "big") for i in range(4)]
        # Step 1: a (16 tokens) is computed into GPU blocks 1-4; its blocks are stored.
        a = v.Request("a", list(hashes), 16, 0, None)
        assert sched.get_num_new_matched_tokens(a, 0) == (0, False)
        blocks_a = [1, 2, 3, 4]
        sched.update_state_after_alloc(a, blocks_of(blocks_a), 0)
        workers.all("write", (blocks_a, 1))
        engine_step(output(new=[(a, blocks_a)]))
        assert [j.gpu_blocks for j in sched.planned.stores] == [blocks_a]
        stored = workers.all("read", blocks_a)
        a.num_computed_tokens = 16
        assert sched.request_finished(a, blocks_a) == (True, None)
        # Step 2: a's stores run; once every rank reports them, vLLM frees a's blocks ...
        assert engine_step(output(finished=["a"])).finished_sending == ["a"]
        events = sched.take_events()
        assert sorted(h for e in events for h in e.block_hashes) == \
            sorted(int.from_bytes(h, "big") for h in hashes)
        workers.all("write", (blocks_a, 99))  # ... and the GPU cache reuses them.
        # Step 3: b shares a's 16 tokens: loaded into other blocks, in another order.
        b = v.Request("b", list(hashes) + [(200).to_bytes(8, "big")], 20, 0, None)
        assert sched.get_num_new_matched_tokens(b, 0) == (16, True)
        blocks_b = [4, 3, 2, 1, 5]
        sched.update_state_after_alloc(b, blocks_of(blocks_b), 16)
        assert engine_step(output()).finished_recving == ["b"]
        assert [j.gpu_blocks for j in sched.planned.loads] == [blocks_b[:4]]
        loaded = workers.all("read", blocks_b[:4])
        for r in range(TP):
            for src, dst in zip(blocks_a, blocks_b):
                assert loaded[r][dst] == stored[r][src], f"rank {r}: block {dst}"
            assert stored[r][1] != stored[1 - r][1]  # each rank has its own shard
        assert sched.request_finished(b, blocks_b) == (False, None)
        assert sched.scheduler.jobs_in_flight == 0
        assert sched.scheduler.stats()["loads_ok"] == 1
    finally:
        if workers is not None:
            workers.stop()
        sched.shutdown()
    assert not segment.exists()
