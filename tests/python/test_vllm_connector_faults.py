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
- drop_report: rank 1's report of b's load never reaches the coordinator. vLLM names b once
  every worker reported it, with every worker's failed copies in the same output's
  invalid_block_ids (none): the load is settled ok in that step, and its deadline changes
  nothing. b, preempted and scheduled again before that deadline, loads again.
- delay_copy: rank 1's copy of b's load is held (its forward does not wait for it), so
  kvconnect's coordinator fails the load at its step deadline before vLLM's sets name b. vLLM
  reads failed loads only from its workers, before it calls update_connector_output: the
  scheduler side releases nothing itself; the next step flushes the failed load, rank 1 waits
  for its copy and names b with the load's blocks as load errors, and vLLM names b once, with
  those blocks invalid: b is recomputed, one step after its deadline.
All: nothing is left (jobs, requests, transfers, processes, the segment).
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import vllm_engine as e  # noqa: E402
import vllm_standins as v  # noqa: E402


def run(name: str, faults: list[str], check, straggling: int = 0,
        job_timeout_steps: int = 2) -> None:
    engine_id = f"pytest-{os.getpid()}-{name}"
    extra = e.extra_config(job_timeout_steps=job_timeout_steps, faults=faults)
    with e.engine(engine_id, extra) as (sched, workers):
        check(sched, workers)
        e.check_nothing_left(sched, workers, straggling)


def test_a_failed_load_comes_back_as_invalid_block_ids_and_the_request_still_finishes():
    def check(sched, workers):
        blocks_a, stored = e.store_a(sched, workers)
        kv_out, blocks_b = e.load_b(sched, workers)
        assert kv_out.finished_recving == {"b"}
        assert kv_out.invalid_block_ids == set(blocks_b[:4])  # rank 1's own, through vLLM
        assert workers.all("faults") == [{}, {"fail_copy": 1}]
        # vLLM's sets settled the load as failed; the coordinator's failure changed nothing.
        stats = sched.scheduler.stats()
        assert (stats["loads_ok"], stats["loads_failed"]) == (0, 1)
        assert (stats["loads_settled"], stats["settled_results"]) == (1, 1)
        loaded = workers.all("read", blocks_b[:4])
        for src, dst in zip(blocks_a, blocks_b):
            assert loaded[0][dst] == stored[0][src], f"rank 0: block {dst}"
        # vLLM's own metrics count the transfers that succeeded: rank 0's load, both stores.
        rank_bytes = 4 * e.page_bytes() * e.LAYERS
        logged = workers.front_end.logged.data
        assert [b for b, _ in logged["CPU_to_GPU"]] == [rank_bytes]
        assert [b for b, _ in logged["GPU_to_CPU"]] == [rank_bytes] * e.TP

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


def test_a_load_whose_last_report_is_lost_is_settled_by_vllms_sets_and_its_deadline_is_a_no_op():
    def check(sched, workers):
        blocks_a, stored = e.store_a(sched, workers)
        # Step 3: rank 1's report of b's load never reaches kvconnect's coordinator, but vLLM's
        # aggregation names b (every worker reported it) with no invalid block: every rank's
        # copy succeeded, and the load completes now.
        kv_out, blocks_b, b = e.start_b(sched, workers, wait=False)
        assert kv_out.finished_recving == {"b"}
        assert not kv_out.invalid_block_ids
        stats = sched.scheduler.stats()
        assert (stats["loads_ok"], stats["loads_failed"], stats["loads_settled"]) == (1, 0, 1)
        assert sched.scheduler.jobs_in_flight == 0
        assert sched.scheduler.tables()["settled"] == 1
        e.check_loaded(workers, blocks_a, stored, blocks_b)
        assert sched.request_finished(b, blocks_b) == (False, None)
        # Steps 4 and 5: the load's step deadline fails rank 1's part in the coordinator; that
        # result changes nothing (no invalid block, no second finished_recving).
        for _ in range(2):
            out = e.engine_step(sched, workers, e.output())
            assert not out.finished_recving and not out.invalid_block_ids
        faults = sched.scheduler.fault_statistics()
        assert (faults["injected"], faults["timed_out"]) == ({"drop_report": 1}, 1)
        stats = sched.scheduler.stats()
        assert (stats["loads_ok"], stats["loads_failed"], stats["settled_results"]) == (1, 0, 1)
        assert stats["rejected_results"] == 0
        assert sched.scheduler.tables()["settled"] == 0

    run("drop-load-report", ["drop_report:rank=1,step=3,nth=0"], check, straggling=1)


def test_a_request_preempted_after_its_settled_load_loads_again():
    def check(sched, workers):
        blocks_a, stored = e.store_a(sched, workers)
        # Step 3: b's load, rank 1's report lost; vLLM's sets name b and it runs (step 4).
        kv_out, blocks_b, b = e.start_b(sched, workers, wait=False)
        assert kv_out.finished_recving == {"b"}
        b.num_computed_tokens = 16
        running = v.SchedulerOutput([], v.CachedRequestData(["b"], set(), [None], [16]),
                                    {"b": 1}, set(), [])
        e.engine_step(sched, workers, running)
        # Step 5: b is preempted (its GPU blocks freed and overwritten), before the coordinator
        # decided the first load (its deadline is step 6's planning, after b's next alloc).
        b.num_computed_tokens = 0
        e.engine_step(sched, workers, v.SchedulerOutput([], v.CachedRequestData([], set(), [], []),
                                                        {}, set(), ["b"]))
        workers.all("write", (blocks_b, 98))
        # Scheduled again: b loads a's prefix a second time, into other blocks.
        assert sched.get_num_new_matched_tokens(b, 0) == (16, True)
        again = [5, 1, 2, 3, 4]
        sched.update_state_after_alloc(b, e.blocks_of(again), 16)
        kv_out = e.engine_step(sched, workers, e.output())
        assert [j.gpu_blocks for j in sched.planned.loads] == [again[:4]]
        assert kv_out.finished_recving == {"b"}
        assert not kv_out.invalid_block_ids
        e.check_loaded(workers, blocks_a, stored, again)
        assert sched.request_finished(b, again) == (False, None)
        e.engine_step(sched, workers, e.output())  # the finished id goes to the workers
        # Both loads were settled by vLLM's sets; the coordinator's results (the first one's
        # deadline, the second one's reports) changed nothing.
        stats = sched.scheduler.stats()
        assert (stats["loads_ok"], stats["loads_failed"]) == (2, 0)
        assert (stats["loads_settled"], stats["settled_results"]) == (2, 2)

    run("reload-after-preemption", ["drop_report:rank=1,step=3,nth=0"], check, straggling=1,
        job_timeout_steps=3)


def test_a_load_failed_at_its_deadline_reaches_vllm_through_the_workers_and_is_recomputed():
    def check(sched, workers):
        blocks_a, stored = e.store_a(sched, workers)
        # Step 3: b's load; rank 1's copy is held (rank 1's forward does not wait for it), rank
        # 0's ends: vLLM's aggregation has not named b.
        kv_out, blocks_b, b = e.start_b(sched, workers, hold=(1,))
        load = sched.planned.loads[0].id
        assert not kv_out.finished_recving and not kv_out.invalid_block_ids
        # Step 4, then step 5: the load's second later step, whose deadline fails rank 1's part
        # in the coordinator. Nothing reaches vLLM from the scheduler side (vLLM would not read
        # invalid blocks given there, and would run b on blocks rank 1 never filled).
        for _ in range(2):
            out = e.engine_step(sched, workers, e.output(), hold=(1,))
            assert not out.finished_recving and not out.invalid_block_ids
        assert sched.scheduler.fault_statistics()["timed_out"] == 1
        assert sched.scheduler.stats()["loads_failed"] == 1
        assert sched.scheduler.tables()["awaiting_engine"] == 1
        assert "b" in workers.kv_waits.loading
        # Step 6 flushes the failed load: rank 1 waits for its copy and names b with the load's
        # blocks as load errors; vLLM names b once, those blocks invalid: recomputed.
        out = e.engine_step(sched, workers, e.output())
        assert sched.planned.flush == [load]
        assert out.finished_recving == {"b"}
        assert out.invalid_block_ids == set(blocks_b[:4])
        assert workers.kv_waits.recomputed == ["b"] and workers.kv_waits.ran == []
        assert workers.all("faults") == [{}, {"delay_copy": 1}]
        stats = sched.scheduler.stats()
        assert (stats["loads_ok"], stats["loads_failed"], stats["loads_settled"]) == (0, 1, 0)
        assert sched.scheduler.tables()["awaiting_engine"] == 0
        assert sched.request_finished(b, blocks_b) == (False, None)
        out = e.engine_step(sched, workers, e.output())  # the finished id goes to the workers
        assert not out.finished_recving and not out.invalid_block_ids

    run("deadline-load", ["delay_copy:rank=1,dir=load,nth=0"], check)
