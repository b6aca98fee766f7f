"""The scheduler role with no kvconnect worker attached (a replay of vLLM's calls, whose sets play
the workers' part): the coordinator forgets the jobs vLLM's finished sets complete instead of
timing them out at their deadline, and the pool records KV events only when vLLM takes them
(its kv_events_config)."""
from __future__ import annotations

import os

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
