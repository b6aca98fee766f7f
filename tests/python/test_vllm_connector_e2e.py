"""kvconnect.vllm.KvconnectConnector end to end across processes (vllm_engine.py): two worker
processes (TP=2) with CPU torch tensors as their KV caches, and the parent's scheduler role,
driven in vLLM's per-step order with a GPU cache too small to keep a finished request's blocks:
the blocks one request stored are loaded into other blocks for the next request sharing its
prefix, and every loaded byte equals what was stored, on each rank. Nothing is left behind: no
process, no segment, no job.

In vLLM's order of building (the workers and their KV caches first, then the scheduler side;
vllm/v1/engine/core.py), and in the other order. A worker whose scheduler side never comes gets
a timeout naming the segment, after runtime.ready_timeout_ms. A scheduler side that died leaves
the segment to the next one (never a live one's). A reset_cache with a store in flight
empties the tier and the same cycle then runs byte-exact; one with a load in flight on a rank
ends its request's wait with its loaded bytes (stale, not failed: no rank withdraws it).
"""
from __future__ import annotations

import multiprocessing
import os

import pytest

torch = pytest.importorskip("torch")

import kvconnect  # noqa: E402
import vllm_engine as e  # noqa: E402
import vllm_standins as v  # noqa: E402
from kvconnect.vllm import (  # noqa: E402
    KVConnectorRole,
    KvconnectConnector,
    KvconnectConnectorMetadata,
)


def check_prefix_reuse(sched: KvconnectConnector, workers: e.Workers) -> None:
    """a's blocks are stored, freed and overwritten on the GPU; b, sharing a's prefix, loads
    them into other blocks: byte-exact on both ranks."""
    blocks_a, stored = e.store_a(sched, workers)
    events = sched.take_events()
    assert sorted(h for ev in events for h in ev.block_hashes) == \
        sorted(int.from_bytes(h, "big") for h in e.prefix_hashes())
    e.load_b_checked(sched, workers, blocks_a, stored)
    for r in range(e.TP):
        assert stored[r][1] != stored[1 - r][1]  # each rank has its own shard
    assert sched.scheduler.stats()["loads_ok"] == 1
    e.check_nothing_left(sched, workers)


def test_workers_built_first_as_vllm_builds_them_load_what_was_stored_byte_exact():
    engine_id = f"pytest-{os.getpid()}-workers-first"
    segment = e.segment_path(engine_id)
    extra = e.extra_config()
    workers = e.Workers(engine_id, extra)
    sched = None
    try:
        # Both workers built their connectors and registered their KV caches with no scheduler
        # side anywhere: neither call waited for it. The first of them created the segment.
        workers.ready()
        assert segment.exists()
        sched = e.scheduler(engine_id, extra)
        assert sched.scheduler.segment_name == "/" + segment.name
        # No wait_for_workers: the first build_connector_meta waits for every rank to join.
        check_prefix_reuse(sched, workers)
    finally:
        if sched is not None:
            sched.shutdown()
        workers.stop()
    assert not segment.exists()


def test_scheduler_built_first_workers_find_it_in_the_segment():
    engine_id = f"pytest-{os.getpid()}-scheduler-first"
    extra = e.extra_config()
    sched = e.scheduler(engine_id, extra)
    segment = e.segment_path(engine_id)
    assert sched.scheduler.segment_name == "/" + segment.name
    workers = None
    try:
        workers = e.Workers(engine_id, extra)
        workers.ready()
        sched.scheduler.wait_for_workers(e.REPLY_S)
        check_prefix_reuse(sched, workers)
    finally:
        if workers is not None:
            workers.stop()
        sched.shutdown()
    assert not segment.exists()


def test_a_worker_whose_scheduler_never_comes_gets_a_timeout_naming_the_segment():
    # The registration gives up after ready_timeout_ms (0.2 s); the step's own wait
    # (step_timeout_ms, 10 min) is far longer, so the error can only be the registration's.
    engine_id = f"pytest-{os.getpid()}-no-scheduler"
    segment = e.segment_path(engine_id)
    extra = e.extra_config(ready_timeout_ms=200, step_timeout_ms=600_000)
    c = KvconnectConnector(e.vllm_config(extra, engine_id, rank=0), KVConnectorRole.WORKER,
                           e.kv_cache_config())
    try:
        c.register_kv_caches(e.kv_tensors())  # returns: the rank joins in the background
        assert segment.exists()
        with pytest.raises(kvconnect.Timeout, match="no scheduler side published its port in "
                                                    f"segment /{segment.name} within 200 ms"):
            c.bind_connector_metadata(KvconnectConnectorMetadata(1))
        # Every later step gets the same error, at once.
        with pytest.raises(kvconnect.Timeout, match="no scheduler side"):
            c.bind_connector_metadata(KvconnectConnectorMetadata(1))
    finally:
        c.shutdown()
    assert not segment.exists()


def test_workers_with_a_fixed_port_built_first_join_the_scheduler_once_it_listens_there():
    # A rank on another node than the scheduler side has no segment with its port: the extra
    # config names where it listens (runtime.host, runtime.port), and the workers, built
    # first as vLLM builds them, reach it there once it does.
    engine_id = f"pytest-{os.getpid()}-fixed-port"
    with e.engine(engine_id, e.extra_config(host="127.0.0.1", port=e.free_port())) as \
            (sched, workers):
        check_prefix_reuse(sched, workers)


def test_a_worker_with_a_fixed_port_waits_there_not_for_the_segments_port():
    # A scheduler side serves the node's segment (its port published there), but the worker's
    # config names another port: the worker goes by its config, and nothing answers there.
    engine_id = f"pytest-{os.getpid()}-fixed-port-silent"
    port = e.free_port()
    sched = e.scheduler(engine_id, e.extra_config())
    try:
        assert sched.scheduler.port not in (0, port)
        extra = e.extra_config(host="127.0.0.1", port=port, ready_timeout_ms=300,
                               step_timeout_ms=600_000)
        c = KvconnectConnector(e.vllm_config(extra, engine_id, rank=0), KVConnectorRole.WORKER,
                               e.kv_cache_config())
        try:
            c.register_kv_caches(e.kv_tensors())
            with pytest.raises(kvconnect.Timeout, match="no scheduler side answered at "
                                                        f"127.0.0.1:{port} within 300 ms"):
                c.bind_connector_metadata(KvconnectConnectorMetadata(1))
        finally:
            c.shutdown()
    finally:
        sched.shutdown()
    assert not e.segment_path(engine_id).exists()


def test_a_scheduler_side_that_died_leaves_the_segment_to_the_next_one():
    # The worker role (built first, as vLLM builds it) creates the node's segment; a scheduler
    # role in another process attaches it, publishes its port and dies.
    engine_id = f"pytest-{os.getpid()}-scheduler-died"
    extra = e.extra_config()
    worker = KvconnectConnector(e.vllm_config(extra, engine_id, rank=0), KVConnectorRole.WORKER,
                                e.kv_cache_config())
    sched = None
    try:
        dying = multiprocessing.get_context("spawn").Process(target=e.scheduler_that_dies,
                                                             args=(engine_id, extra))
        dying.start()
        dying.join(e.REPLY_S)
        assert dying.exitcode == 0
        # The next scheduler side of the same engine takes the segment over; a second one while
        # it lives is refused.
        sched = e.scheduler(engine_id, extra)
        assert sched.scheduler.port != 0
        with pytest.raises(kvconnect.Error, match="served by another scheduler side"):
            e.scheduler(engine_id, extra)
    finally:
        if sched is not None:
            sched.shutdown()
        worker.shutdown()
    assert not e.segment_path(engine_id).exists()


def test_reset_cache_with_a_load_in_flight_ends_its_wait_with_its_bytes():
    """vLLM main's reset_cache while b's load is in flight on rank 1 (its copy held, so rank 1
    has not named b): the next step flushes the stale load without naming it failed, rank 1
    waits for its copy and names b with no load error (the reset empties the tier's index, not
    the slots the copy reads), vLLM names b once with no invalid block and b runs on its loaded
    blocks, byte-exact on both ranks."""
    engine_id = f"pytest-{os.getpid()}-reset-load"
    extra = e.extra_config(faults=["delay_copy:rank=1,dir=load,nth=0"])
    with e.engine(engine_id, extra) as (sched, workers):
        blocks_a, stored = e.store_a(sched, workers)
        kv_out, blocks_b, b = e.start_b(sched, workers, hold=(1,))
        (load,) = sched.planned.loads
        assert not kv_out.finished_recving and not kv_out.invalid_block_ids

        assert sched.reset_cache() is True
        out = e.engine_step(sched, workers, e.output())
        assert (sched.planned.flush, sched.planned.failed) == ([load.id], [])
        assert out.finished_recving == {"b"}
        assert not out.invalid_block_ids
        assert (workers.kv_waits.ran, workers.kv_waits.recomputed) == (["b"], [])
        assert workers.all("faults") == [{}, {"delay_copy": 1}]
        e.check_loaded(workers, blocks_a, stored, blocks_b)
        stats = sched.scheduler.stats()
        assert (stats["stale_results"], stats["loads_failed"]) == (1, 0)
        assert sched.request_finished(b, blocks_b) == (False, None)
        e.engine_step(sched, workers, e.output(finished=["b"]))
        e.check_nothing_left(sched, workers)


def test_reset_cache_with_a_store_in_flight_then_store_and_load_byte_exact():
    """vLLM main's reset_cache between steps, with a's store planned and not yet run: it answers
    True and empties the CPU tier; the next step flushes the store and frees a's blocks (its
    result never reaches the tier: a's prefix no longer hits), and the tier then stores and
    loads a's prefix again byte-exact, leaving nothing behind."""
    engine_id = f"pytest-{os.getpid()}-reset"
    extra = e.extra_config()
    with e.engine(engine_id, extra) as (sched, workers):
        a = v.Request("a0", e.prefix_hashes(), 16, 0, None)
        assert sched.get_num_new_matched_tokens(a, 0) == (0, False)
        blocks_a = [1, 2, 3, 4]
        sched.update_state_after_alloc(a, e.blocks_of(blocks_a), 0)
        workers.all("write", (blocks_a, 1))
        e.engine_step(sched, workers, e.output(new=[(a, blocks_a)]))
        (store,) = sched.planned.stores  # queued by the workers, submitted next step

        assert sched.reset_cache() is True
        stats = sched.scheduler.stats()
        assert (stats["resets"], sched.scheduler.tables()["reset_flush"]) == (1, 1)
        a.num_computed_tokens = 16
        assert sched.request_finished(a, blocks_a) == (True, None)  # its store is in flight
        out = e.engine_step(sched, workers, e.output(finished=["a0"]))
        assert sched.planned.flush == [store.id]
        assert out.finished_sending == {"a0"}
        assert not out.invalid_block_ids
        assert sched.scheduler.stats()["stale_results"] == 1
        assert sched.scheduler.stats()["stores_ok"] == 0
        assert sched.take_events() == []  # nothing was stored

        probe = v.Request("probe", e.prefix_hashes(), 16, 0, None)
        assert sched.get_num_new_matched_tokens(probe, 0) == (0, False)
        assert sched.request_finished(probe, []) == (False, None)
        check_prefix_reuse(sched, workers)


def test_vllms_cross_layer_kv_cache_moves_each_block_whole_and_loads_byte_exact():
    # The connector prefers cross-layer blocks, as vLLM's OffloadingConnector does: vLLM then
    # allocates one cache with every layer's K and V of a block together (vllm_engine.
    # cross_layer_kv_cache) and registers it whole. The engine writes and reads each layer
    # through its own view: a's blocks, stored and loaded into b's, are byte-exact per layer.
    engine_id = f"pytest-{os.getpid()}-cross-layers"
    with e.engine(engine_id, e.extra_config(), cross_layers=True) as (sched, workers):
        check_prefix_reuse(sched, workers)
        # One observation per rank's job: a block of all layers moved as one slot.
        logged = workers.front_end.logged.data
        rank_bytes = 4 * e.page_bytes() * e.LAYERS
        assert logged == {"GPU_to_CPU": [[rank_bytes, logged["GPU_to_CPU"][r][1]]
                                         for r in range(e.TP)],
                          "CPU_to_GPU": [[rank_bytes, logged["CPU_to_GPU"][r][1]]
                                         for r in range(e.TP)]}


def test_a_cross_layer_kv_cache_whose_blocks_are_not_outermost_is_refused():
    engine_id = f"pytest-{os.getpid()}-cross-refused"
    extra = e.extra_config()
    c = KvconnectConnector(e.vllm_config(extra, engine_id, 0), KVConnectorRole.WORKER,
                           e.kv_cache_config())
    try:
        cross, _ = e.cross_layer_kv_cache()
        with pytest.raises(ValueError, match="must keep the blocks outermost.*LayersOutermost"):
            c.register_cross_layers_kv_cache(cross, v.LayersOutermostBackend)
        with pytest.raises(ValueError, match="must keep the blocks outermost.*NoBlocks"):
            c.register_cross_layers_kv_cache(cross, v.NoBlocksBackend)
        with pytest.raises(ValueError, match="must be contiguous"):
            c.register_cross_layers_kv_cache(cross.transpose(0, 1), v.FlashAttentionBackend)
        with pytest.raises(ValueError, match="of 3584 bytes; vLLM's kv_cache_config has 4096"):
            c.register_cross_layers_kv_cache(cross[:7], v.FlashAttentionBackend)
        with pytest.raises(ValueError, match="of 3584 bytes is not num_blocks = 5 blocks"):
            c.worker.register_cross_layers_kv_cache(cross[:7], 5)  # the binding's own check
        assert c.worker.transfers_in_flight == 0
        # Nothing was registered: the right cache still is.
        c.register_cross_layers_kv_cache(cross, v.FlashAttentionBackend)
    finally:
        c.shutdown()
    assert not e.segment_path(engine_id).exists()


def test_workers_in_the_schedulers_process_as_vllms_uniproc_executor_runs_them():
    # vLLM on one GPU runs its worker in the EngineCore process, beside the scheduler
    # (UniProcExecutor): the worker role's connector is built there first, then the scheduler
    # role's, in one process (here two worker threads), and the same cycle is byte-exact.
    engine_id = f"pytest-{os.getpid()}-uniproc"
    with e.engine(engine_id, e.extra_config(), in_process=True) as (sched, workers):
        check_prefix_reuse(sched, workers)


def test_vllms_async_scheduling_plans_each_step_before_the_last_ones_output_byte_exact():
    # vLLM's default (async scheduling, on unless something is incompatible; R1): EngineCore's
    # batch queue schedules step N + 1 (its build_connector_meta) before update_from_output of
    # step N. a is stored, freed and overwritten, then b loads a's prefix, all in that order.
    engine_id = f"pytest-{os.getpid()}-async"
    with e.engine(engine_id, e.extra_config()) as (sched, workers):
        outputs = []

        def pipelined(out, previous):
            step = e.schedule_step(sched, workers, out)  # before the previous step's output
            if previous is not None:
                outputs.append(e.finish_step(sched, workers, *previous))
            return step

        a = v.Request("a", e.prefix_hashes(), 16, 0, None)
        assert sched.get_num_new_matched_tokens(a, 0) == (0, False)
        blocks_a = [1, 2, 3, 4]
        sched.update_state_after_alloc(a, e.blocks_of(blocks_a), 0)
        workers.all("write", (blocks_a, 1))
        s1 = pipelined(e.output(new=[(a, blocks_a)]), None)
        assert [j.gpu_blocks for j in sched.planned.stores] == [blocks_a]
        stored = workers.all("read", blocks_a)
        s2 = pipelined(e.output(), s1)  # step 1's output: a finishes there
        a.num_computed_tokens = a.num_tokens
        assert sched.request_finished(a, blocks_a) == (True, None)
        s3 = pipelined(e.output(finished=["a"]), s2)
        s4 = pipelined(e.output(), s3)
        assert {"a"} == set().union(*(o.finished_sending or () for o in outputs))
        workers.all("write", (blocks_a, 99))  # vLLM reused a's freed blocks

        b = v.Request("b", e.prefix_hashes() + [(200).to_bytes(8, "big")], 20, 0, None)
        assert sched.get_num_new_matched_tokens(b, 0) == (16, True)
        blocks_b = [4, 3, 2, 1, 5]
        sched.update_state_after_alloc(b, e.blocks_of(blocks_b), 16)
        s5 = pipelined(e.output(), s4)
        assert [j.gpu_blocks for j in sched.planned.loads] == [blocks_b[:4]]
        s6 = pipelined(e.output(), s5)
        outputs.append(e.finish_step(sched, workers, *s6))
        assert {"b"} == set().union(*(o.finished_recving or () for o in outputs))
        assert not set().union(*(o.invalid_block_ids or () for o in outputs))
        e.check_loaded(workers, blocks_a, stored, blocks_b)
        assert sched.request_finished(b, blocks_b) == (False, None)
        e.check_nothing_left(sched, workers)


def test_uneven_pipeline_stages_each_load_what_they_stored_byte_exact():
    # PP 4 of a 6-layer model, as vLLM splits it: stages of [1, 2, 2, 1] layers, each worker's
    # kv_cache_config its own stage's (the scheduler's is stage 0's, a smaller one). One pool
    # for all: every rank stores and loads its own layers byte-exact.
    engine_id = f"pytest-{os.getpid()}-stages"
    shape = e.Shape(tp=1, stages=(1, 2, 2, 1))
    with e.engine(engine_id, e.extra_config(), shape=shape) as (sched, workers):
        # vLLM's count: cpu_bytes_to_use // (stage 0's bytes per block * world size).
        assert sched.scheduler.num_cpu_blocks == \
            e.extra_config()["cpu_bytes_to_use"] // (1 * e.page_bytes() * 4)
        check_prefix_reuse(sched, workers)
        stored = workers.all("read", [1])
        assert [len(layers) for layers in (s[1] for s in stored)] == [1, 2, 2, 1]
