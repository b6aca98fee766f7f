"""The scheduler role with no kvconnect worker attached (a replay of vLLM's calls, whose sets play
the workers' part): the coordinator forgets the jobs vLLM's finished sets complete instead of
timing them out at their deadline, and the pool records KV events only when vLLM takes them
(its kv_events_config)."""
from __future__ import annotations

import os

import pytest

import kvconnect
import vllm_standins as v
from kvconnect.vllm import KVConnectorRole, KvconnectConnector

BLOCK = 16


def scheduler_role(name: str, events: bool = True,
                   runtime: dict | None = None) -> KvconnectConnector:
    instance = f"pytest-{os.getpid()}-{name}"
    extra = {"cpu_bytes_to_use": 64 * 4096,
             "runtime": {"instance": instance, "token": "t", **(runtime or {})}}
    config = v.vllm_config(extra, instance, BLOCK)
    config.kv_events_config.enable_kv_cache_events = events
    return KvconnectConnector(config, KVConnectorRole.SCHEDULER,
                              v.kv_cache_config(1024, 4096, BLOCK))


def store_step(c: KvconnectConnector, step: int, rid: str, blocks: int) -> v.Request:
    """A new request of `blocks` full blocks, scheduled whole: its store is planned."""
    r = v.Request(rid, [f"{rid}-{b}".encode() for b in range(blocks)], blocks * BLOCK, 0, None)
    assert c.get_num_new_matched_tokens(r, 0) == (0, False)
    ids = list(range(1 + blocks * step, 1 + blocks * (step + 1)))
    c.update_state_after_alloc(r, v.KVCacheBlocks(([v.KVCacheBlock(b, None, False)
                                                    for b in ids],)), 0)
    out = v.SchedulerOutput([v.NewRequestData(rid, (ids,), 0)], v.CachedRequestData([], set(),
                                                                                    [], []),
                            {rid: blocks * BLOCK}, set(), [])
    c.build_connector_meta(out)
    assert len(c.planned.stores) == 1
    return r


def test_a_replay_without_workers_keeps_the_coordinator_flat_and_times_nothing_out():
    # Step deadlines two steps out: a job the engine's finished_sending completed would fail
    # there, be logged and be rejected by the planner, if the coordinator still waited for it.
    c = scheduler_role("flat", runtime={"job_timeout_steps": 2})
    try:
        sc = c.scheduler
        for step in range(1, 9):
            rid = f"r{step}"
            r = store_step(c, step, rid, 2)
            assert sc.tables()["coordinator_jobs"] == 1
            assert c.request_finished(r, []) == (True, None)  # delay_free: it stored
            out = v.KVConnectorOutput(finished_sending={rid})
            c.update_connector_output(out)
            assert out.finished_sending == {rid}
            assert sc.tables()["coordinator_jobs"] == 0, f"step {step}"
        assert sc.stats()["stores_ok"] == 8
        assert sc.stats()["rejected_results"] == 0
        assert sc.fault_statistics()["timed_out"] == 0
    finally:
        c.shutdown()


def test_the_pool_records_kv_events_only_when_vllms_kv_events_config_takes_them():
    for events in (True, False):
        c = scheduler_role(f"events-{events}", events=events)
        try:
            r = store_step(c, 1, "a", 2)
            c.request_finished(r, [])
            c.update_connector_output(v.KVConnectorOutput(finished_sending={"a"}))
            taken = c.take_events()
            if events:
                assert [type(e).__name__ for e in taken] == ["BlockStored"]
                assert len(taken[0].block_hashes) == 2
            else:
                assert taken == []
                assert c.scheduler.take_events() == []  # none recorded, not dropped later
        finally:
            c.shutdown()


def test_kv_events_of_another_type_is_a_type_error_and_nothing_is_created():
    config = kvconnect.Config(topology={"tensor_parallel": 1},
                              kv_cache={"gpu_block_size": BLOCK, "layers": 1, "page_bytes": 4096},
                              offload={"cpu_bytes_to_use": 64 * 4096})
    instance = f"pytest-{os.getpid()}-kvevents"
    with pytest.raises(TypeError):
        kvconnect.SchedulerConnector(config, instance=instance, token="t", listen=False,
                                     transport="memory", kv_events="yes")
    # Nothing was left behind: the same instance's segment can be created now.
    with kvconnect.SchedulerConnector(config, instance=instance, token="t", listen=False,
                                      transport="memory", kv_events=False) as sc:
        assert sc.take_events() == []


def test_take_events_on_the_worker_role_is_the_roles_error():
    torch = pytest.importorskip("torch")
    instance = f"pytest-{os.getpid()}-workerevents"
    extra = {"cpu_bytes_to_use": 64 * 4096, "runtime": {"instance": instance, "token": "t"}}
    worker = KvconnectConnector(v.vllm_config(extra, instance, BLOCK), KVConnectorRole.WORKER,
                                v.kv_cache_config(64, 4096, BLOCK))
    try:
        worker.register_kv_caches({"layer0": torch.zeros((2, 64, BLOCK, 64), dtype=torch.float16)})
        with pytest.raises(RuntimeError, match="not the scheduler role"):
            worker.take_events()
    finally:
        worker.shutdown()
