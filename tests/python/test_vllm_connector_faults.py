"""Faults through kv_connector_extra_config (runtime.faults, docs/faults.md) end to end: two
worker processes (TP=2) built first, as vLLM builds them, the scheduler role, and the engine
loop of vllm_engine.py in vLLM's order. Deadlines are counted in steps (job_timeout_steps), so
when they fire is known without waiting on time.

- fail_copy: rank 1's load fails; its blocks come back as invalid block ids (vLLM recomputes
  them), the request still finishes receiving, rank 0's load is byte-exact, no exception.
- fail_copy: rank 1's store of a fails, while vLLM's own set says a is done (every worker is):
  a's GPU blocks are freed, but the store's outcome is kvconnect's coordinator's: the blocks
  are not offered to the next request (whose rank-1 bytes were never written); stored again,
  they load byte-exact on both ranks.
- drop_report: rank 1's report of the step that completed a's stores never reaches kvconnect's
  coordinator. The request does not wait for it (vLLM's own sets free it in that step); the
  coordinator fails rank 1's part at the step deadline (nothing confirms its bytes), so the
  blocks are not offered, and a is not reported to vLLM a second time.
Both: nothing is left (jobs, requests, transfers, processes, the segment).
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import vllm_engine as e  # noqa: E402
import vllm_standins as v  # noqa: E402


def run(name: str, faults: list[str], check, straggling: int = 0) -> None:
    engine_id = f"pytest-{os.getpid()}-{name}"
    extra = e.extra_config(job_timeout_steps=2, faults=faults)
    workers = e.Workers(engine_id, extra)
    sched = None
    try:
        workers.ready()
        sched = e.scheduler(engine_id, extra)
        check(sched, workers)
        e.check_nothing_left(sched, workers, straggling)
    finally:
        if sched is not None:
            sched.shutdown()
        workers.stop()
    assert not e.segment_path(engine_id).exists()


def test_a_failed_load_comes_back_as_invalid_block_ids_and_the_request_still_finishes():
    def check(sched, workers):
        blocks_a, stored = e.store_a(sched, workers)
        kv_out, blocks_b = e.load_b(sched, workers)
        assert kv_out.finished_recving == {"b"}
        assert kv_out.invalid_block_ids == set(blocks_b[:4])
        assert workers.all("faults") == [{}, {"fail_copy": 1}]
        loaded = workers.all("read", blocks_b[:4])
        for src, dst in zip(blocks_a, blocks_b):
            assert loaded[0][dst] == stored[0][src], f"rank 0: block {dst}"

    run("fail-load", ["fail_copy:rank=1,dir=load,nth=0"], check)


def test_a_store_that_failed_on_one_rank_is_not_offered_and_every_loaded_byte_is_right():
    def check(sched, workers):
        # Step 2: vLLM's set names a (applied first) while rank 1's report fails the store.
        e.store_a(sched, workers)
        assert workers.all("faults") == [{}, {"fail_copy": 1}]
        stats = sched.scheduler.stats()
        assert (stats["stores_ok"], stats["stores_failed"]) == (0, 1)
        assert sched.scheduler.jobs_in_flight == 0
        # b shares a's 16 tokens: nothing is offered (rank 1 never wrote those bytes).
        b = v.Request("b", e.prefix_hashes() + [(200).to_bytes(8, "big")], 20, 0, None)
        assert sched.get_num_new_matched_tokens(b, 0) == (0, False)
        assert sched.request_finished(b, []) == (False, None)
        # Computed and stored again (the fault fired once), the blocks load byte-exact.
        blocks_a, stored = e.store_a(sched, workers)
        assert sched.scheduler.stats()["stores_ok"] == 1
        e.load_b_checked(sched, workers, blocks_a, stored)

    run("fail-store", ["fail_copy:rank=1,dir=store,at=completion,nth=0"], check)


def test_a_dropped_report_delays_no_request_and_its_deadline_drops_the_store():
    def check(sched, workers):
        # Step 2's reports carry a's completed stores: rank 1's is dropped (so step 2's output
        # is not waited for).
        e.store_a(sched, workers, wait=False)  # a finished sending in step 2
        assert sched.scheduler.tables()["coordinator_jobs"] == 1  # rank 1's part is open
        # Step 3 is the store's second later step: its deadline fails rank 1's part.
        out = e.engine_step(sched, workers, e.output())
        # Step 3's output came from both ranks, so rank 1's step-2 report (sent before it on the
        # same channel) has arrived and was dropped: only now is the fault's count settled.
        assert sched.scheduler.fault_statistics()["injected"] == {"drop_report": 1}
        assert not out.finished_sending and not out.finished_recving
        assert not out.invalid_block_ids
        assert sched.scheduler.fault_statistics()["timed_out"] == 1
        stats = sched.scheduler.stats()
        assert (stats["stores_ok"], stats["stores_failed"]) == (0, 1)
        b = v.Request("b", e.prefix_hashes() + [(200).to_bytes(8, "big")], 20, 0, None)
        assert sched.get_num_new_matched_tokens(b, 0) == (0, False)
        assert sched.request_finished(b, []) == (False, None)

    # The timed-out job's entry waits for rank 1's late report (its straggler grace, 30 s).
    run("drop-report", ["drop_report:rank=1,step=2,nth=0"], check, straggling=1)
