"""kvconnect.vllm.KvconnectConnector end to end in one process: the scheduler role, then two
worker-role connectors (TP=2) whose KV caches are CPU torch tensors (the sim backend adopts
them), driven in vLLM's per-step order by a small engine loop with a GPU cache too small to keep
a finished request's blocks. A request stored by one request is loaded into other GPU blocks for
the next one sharing its prefix, and every loaded byte equals what was stored, on each rank.

The test's "forward" is the worker's finish_transfers(): every transfer submitted so far has
finished when it returns, so each step's outcome is known without waiting on time. vLLM's order
of building (workers first) is not covered: the scheduler side is built first here.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import vllm_standins as v  # noqa: E402
from kvconnect.vllm import KVConnectorRole, KvconnectConnector  # noqa: E402

BLOCK = 4  # tokens per GPU block (= offloaded block)
NUM_BLOCKS = 8  # GPU blocks per rank, block 0 is vLLM's null block
LAYERS = 2
HEADS, HEAD_DIM = 2, 8  # per rank
TP = 2


def layer_tensor() -> "torch.Tensor":
    # FlashAttention's layout: (2 for K and V, blocks, block size, heads, head_dim).
    return torch.zeros((2, NUM_BLOCKS, BLOCK, HEADS, HEAD_DIM), dtype=torch.float16)


def page_bytes() -> int:
    return 2 * BLOCK * HEADS * HEAD_DIM * 2  # K and V of one block of one layer, fp16


class Rank:
    def __init__(self, extra: dict, engine_id: str, rank: int):
        config = v.vllm_config(extra, engine_id, BLOCK, tp=TP)
        config.parallel_config.rank = rank
        self.kv = {f"layer{i}": layer_tensor() for i in range(LAYERS)}
        self.connector = KvconnectConnector(config, KVConnectorRole.WORKER, kv_cache_config())
        self.connector.register_kv_caches(self.kv)

    def write(self, block: int, tag: int) -> None:
        """The forward computed `block`'s KV for content `tag`."""
        for i, t in enumerate(self.kv.values()):
            t[:, block] = float(tag * 10 + i)

    def block_bytes(self, block: int) -> list[bytes]:
        return [t[:, block].numpy().tobytes() for t in self.kv.values()]

    def step(self, meta, finished: set[str]) -> tuple[set[str], set[str], set[int]]:
        c = self.connector
        c.bind_connector_metadata(meta)
        c.handle_preemptions(meta)
        c.start_load_kv(None)
        c.worker.finish_transfers()  # the forward: every transfer so far has finished
        c.wait_for_save()
        sending, recving = c.get_finished(finished)
        errors = c.get_block_ids_with_load_errors()
        c.clear_connector_metadata()
        return sending, recving, errors


def kv_cache_config() -> v.KVCacheConfig:
    return v.kv_cache_config(NUM_BLOCKS, page_bytes(), BLOCK, layers=LAYERS)


def aggregate(reports: list[set[str]]) -> list[str]:
    """vLLM's KVOutputAggregator: an id is finished once every worker reported it."""
    return sorted(set.intersection(*reports))


def test_a_stored_prefix_is_loaded_byte_exact_on_every_rank():
    engine_id = f"pytest-{os.getpid()}-e2e"
    extra = {"cpu_bytes_to_use": 16 * TP * LAYERS * page_bytes(),
             "runtime": {"job_timeout_ms": 0}}
    sched = KvconnectConnector(v.vllm_config(extra, engine_id, BLOCK, tp=TP),
                               KVConnectorRole.SCHEDULER, kv_cache_config())
    segment = Path("/dev/shm") / sched.scheduler.segment_name.lstrip("/")
    ranks = []
    try:
        worker_extra = dict(extra, runtime={"job_timeout_ms": 0, "port": sched.scheduler.port})
        ranks = [Rank(worker_extra, engine_id, r) for r in range(TP)]
        sched.scheduler.wait_for_workers(30.0)

        def engine_step(out: v.SchedulerOutput, write: dict[int, int]) -> v.KVConnectorOutput:
            meta = sched.build_connector_meta(out)
            results = []
            for rank in ranks:
                for block, tag in write.items():
                    rank.write(block, tag)
                results.append(rank.step(meta, out.finished_req_ids))
            assert all(not errors for _, _, errors in results)
            kv_out = v.KVConnectorOutput(aggregate([s for s, _, _ in results]),
                                         aggregate([r for _, r, _ in results]))
            sched.update_connector_output(kv_out)
            return kv_out

        def output(new=(), finished=()) -> v.SchedulerOutput:
            return v.SchedulerOutput(
                [v.NewRequestData(r.request_id, (blocks,)) for r, blocks in new],
                v.CachedRequestData([], set(), []),
                {r.request_id: r.num_tokens for r, _ in new}, set(finished), [])

        hashes = [(100 + i).to_bytes(8, "big") for i in range(4)]
        # Step 1: a (16 tokens) is computed into GPU blocks 1-4 and stored.
        a = v.Request("a", list(hashes), 16, 0, None)
        assert sched.get_num_new_matched_tokens(a, 0) == (0, False)
        blocks_a = [1, 2, 3, 4]
        sched.update_state_after_alloc(
            a, v.KVCacheBlocks(([v.KVCacheBlock(b, None, False) for b in blocks_a],)), 0)
        engine_step(output(new=[(a, blocks_a)]), {b: 1 + b for b in blocks_a})
        assert [j.gpu_blocks for j in sched.planned.stores] == [blocks_a]
        stored = {r: {b: ranks[r].block_bytes(b) for b in blocks_a} for r in range(TP)}
        a.num_computed_tokens = 16
        assert sched.request_finished(a, blocks_a) == (True, None)
        # Step 2: a's stores run; once every rank reports them, vLLM frees a's blocks.
        kv_out = engine_step(output(finished=["a"]), {})
        assert kv_out.finished_sending == ["a"]
        events = sched.take_events()
        assert sorted(h for e in events for h in e.block_hashes) == \
            sorted(int.from_bytes(h, "big") for h in hashes)
        for rank in ranks:  # the GPU cache reuses a's blocks
            for b in blocks_a:
                rank.write(b, 99)
        # Step 3: b shares a's 16 tokens: they are loaded into other blocks, in another order.
        b = v.Request("b", list(hashes) + [(200).to_bytes(8, "big")], 20, 0, None)
        assert sched.get_num_new_matched_tokens(b, 0) == (16, True)
        blocks_b = [4, 3, 2, 1, 5]
        sched.update_state_after_alloc(
            b, v.KVCacheBlocks(([v.KVCacheBlock(x, None, False) for x in blocks_b],)), 16)
        kv_out = engine_step(output(), {})
        assert [j.gpu_blocks for j in sched.planned.loads] == [blocks_b[:4]]
        assert kv_out.finished_recving == ["b"]
        for r, rank in enumerate(ranks):
            for src, dst in zip(blocks_a, blocks_b):
                assert rank.block_bytes(dst) == stored[r][src], f"rank {r} block {dst}"
        assert sched.request_finished(b, blocks_b) == (False, None)
        assert sched.scheduler.jobs_in_flight == 0
        assert sched.scheduler.stats()["loads_ok"] == 1
    finally:
        for rank in ranks:
            rank.connector.shutdown()
        sched.shutdown()
    assert not segment.exists()
