"""build_connector_meta's two ways in (python/src/step_requests.hpp): vLLM's SchedulerOutput read
by the binding in one call (vllm_build_connector_meta, what kvconnect.vllm uses) must plan what
the tuples that spell out the same fields plan (build_connector_meta), and wrong input from
Python is a TypeError / ValueError / KeyError naming the field, never a crash."""
from __future__ import annotations

import os

import pytest

import kvconnect
import vllm_standins as v

BLOCK = 16


def connector(name: str) -> kvconnect.SchedulerConnector:
    config = kvconnect.Config(
        topology={"tensor_parallel": 1},
        kv_cache={"gpu_block_size": BLOCK, "layers": 1, "page_bytes": 4096},
        offload={"cpu_bytes_to_use": 64 * 4096},
        runtime={"job_timeout_ms": 0, "job_timeout_steps": 0})
    return kvconnect.SchedulerConnector(config, instance=f"pytest-{os.getpid()}-{name}",
                                        token="t", listen=False, transport="memory")


def jobs(meta) -> list:
    return [(j.kind, j.id, j.request_id, list(j.slots), list(j.gpu_blocks), j.skip)
            for j in list(meta.loads) + list(meta.stores)] + \
        [("flush", list(meta.flush), list(meta.flush_requests))]


def request(rid: str, blocks: int, params: dict | None = None) -> v.Request:
    return v.Request(rid, [(rid + str(b)).encode() for b in range(blocks)], blocks * BLOCK, 0,
                     params)


def as_tuple(r: v.Request, scheduled: int, block_ids, resumed: bool) -> tuple:
    remote = bool(r.kv_transfer_params and r.kv_transfer_params.get("do_remote_decode"))
    return (r.request_id, r.block_hashes, r.num_tokens, r.num_computed_tokens, scheduled,
            block_ids, resumed, remote)


def plan_both(by_vllm, by_tuples, step: int, reqs: dict, new: list, cached: list, resumed: set,
              scheduled: dict, preempted: list) -> tuple:
    """The step planned from vLLM's SchedulerOutput, built as vLLM's scheduler builds it from
    `reqs` (new: [(id, block ids)], cached: [(id, new block ids or None)]), and from the same
    fields spelled out as tuples: (vllm_build_connector_meta's, build_connector_meta's)."""
    out = v.SchedulerOutput(
        [v.NewRequestData(rid, (ids,), reqs[rid].num_computed_tokens) for rid, ids in new],
        v.CachedRequestData([rid for rid, _ in cached], resumed,
                            [None if ids is None else (ids,) for _, ids in cached],
                            [reqs[rid].num_computed_tokens for rid, _ in cached]),
        scheduled, set(), preempted)
    got = by_vllm.vllm_build_connector_meta(step, out, reqs)
    want = by_tuples.build_connector_meta(
        step, [as_tuple(reqs[rid], scheduled[rid], ids, False) for rid, ids in new],
        [as_tuple(reqs[rid], scheduled[rid], ids, rid in resumed) for rid, ids in cached],
        preempted)
    return got, want


def test_vllms_scheduler_output_plans_what_the_same_fields_as_tuples_plan():
    by_vllm, by_tuples = connector("vllm"), connector("tuples")
    try:
        # a: a P/D prefill request (its blocks are stored); b: an ordinary one; c: preempted
        # in step 2, resumed in step 3 with all of its blocks again.
        reqs = {"a": request("a", 3, {"do_remote_decode": True}), "b": request("b", 2),
                "c": request("c", 2, {})}
        for r in reqs.values():
            for sc in (by_vllm, by_tuples):
                assert sc.get_num_new_matched_tokens(r.request_id, r.block_hashes, r.num_tokens,
                                                     0, r.request_id == "a") == (0, False)
        # (new: [(id, block ids)], cached: [(id, new block ids or None)], resumed, scheduled
        #  tokens, preempted)
        steps = [
            ([("a", [1, 2, 3]), ("b", [4, 5]), ("c", [6, 7])], [], set(),
             {"a": 48, "b": 32, "c": 32}, []),
            ([], [("a", [8]), ("b", None)], set(), {"a": 1, "b": 1}, ["c"]),
            ([], [("a", None), ("b", [9]), ("c", [10, 11])], {"c"}, {"a": 1, "b": 1, "c": 32},
             []),
        ]
        for step, (new, cached, resumed, scheduled, preempted) in enumerate(steps, start=1):
            for rid, _ in cached:  # decoding: one new token; resumed: computed anew
                r = reqs[rid]
                r.num_tokens += 0 if rid in resumed else 1
                r.num_computed_tokens = 0 if rid in resumed else r.num_tokens - 1
            got, want = plan_both(by_vllm, by_tuples, step, reqs, new, cached, resumed, scheduled,
                                  preempted)
            assert jobs(got) == jobs(want)
            if step == 1:
                assert sorted(j.request_id for j in got.stores) == ["a", "b", "c"]
            done = [(j.id, j.kind, True) for j in list(want.loads) + list(want.stores)]
            for sc in (by_vllm, by_tuples):
                sc.apply_job_results(step, done)
                sc.update_connector_output()
        assert by_vllm.stats() == by_tuples.stats()
    finally:
        by_vllm.shutdown()
        by_tuples.shutdown()


def test_wrong_input_from_python_is_an_error_naming_the_field():
    sc = connector("types")
    try:
        r = request("a", 2)
        sc.get_num_new_matched_tokens("a", r.block_hashes, r.num_tokens, 0)

        def output(new=(("a", ([1, 2],)),), scheduled=None):
            return v.SchedulerOutput([v.NewRequestData(rid, ids, 0) for rid, ids in new],
                                     v.CachedRequestData([], set(), [], []),
                                     scheduled if scheduled is not None else {"a": 32}, set(),
                                     [])

        with pytest.raises(KeyError, match="request b is scheduled but was never passed"):
            sc.vllm_build_connector_meta(1, output(new=(("b", ([1],)),), scheduled={"b": 1}),
                                         {"a": r})
        with pytest.raises(KeyError, match="num_scheduled_tokens has no entry for request a"):
            sc.vllm_build_connector_meta(1, output(scheduled={}), {"a": r})
        with pytest.raises(TypeError, match="Request.num_tokens must be an int, got str"):
            sc.vllm_build_connector_meta(
                1, output(), {"a": v.Request("a", r.block_hashes, "32", 0, None)})
        with pytest.raises(TypeError, match="Request.kv_transfer_params must be a dict or None"):
            sc.vllm_build_connector_meta(1, output(), {"a": v.Request("a", r.block_hashes, 32,
                                                                       0, ["do_remote_decode"])})
        with pytest.raises(TypeError, match="block_ids must be an int, got float"):
            sc.vllm_build_connector_meta(1, output(new=(("a", ([1.0, 2],)),)), {"a": r})
        with pytest.raises(TypeError, match="requests must be a dict"):
            sc.vllm_build_connector_meta(1, output(), [r])
        with pytest.raises(AttributeError):
            sc.vllm_build_connector_meta(1, object(), {"a": r})
        # num_computed_tokens, from the SchedulerOutput.
        with pytest.raises(TypeError, match="num_computed_tokens must be an int, got str"):
            sc.vllm_build_connector_meta(1, v.SchedulerOutput(
                [v.NewRequestData("a", ([1, 2],), "0")], v.CachedRequestData([], set(), [], []),
                {"a": 32}, set(), []), {"a": r})
        with pytest.raises(ValueError, match=r"num_computed_tokens must be in \[0, 2\*\*32\)"):
            sc.vllm_build_connector_meta(1, v.SchedulerOutput(
                [v.NewRequestData("a", ([1, 2],), -1)], v.CachedRequestData([], set(), [], []),
                {"a": 32}, set(), []), {"a": r})
        with pytest.raises(ValueError, match="req_ids, new_block_ids and num_computed_tokens "
                                             "differ in length"):
            sc.vllm_build_connector_meta(1, v.SchedulerOutput(
                [], v.CachedRequestData(["a"], set(), [None], []), {"a": 1}, set(), []),
                {"a": r})
        with pytest.raises(TypeError, match="scheduled_cached_reqs.num_computed_tokens must be "
                                            "a list or tuple, got NoneType"):
            sc.vllm_build_connector_meta(1, v.SchedulerOutput(
                [], v.CachedRequestData(["a"], set(), [None], None), {"a": 1}, set(), []),
                {"a": r})

        t = ("a", r.block_hashes, 32, 0, 32, [1, 2], False, False)
        with pytest.raises(ValueError, match=r"num_scheduled must be in \[0, 2\*\*32\)"):
            sc.build_connector_meta(1, [t[:4] + (-1,) + t[5:]], [], [])
        with pytest.raises(TypeError, match="req_id must be a str, got int"):
            sc.build_connector_meta(1, [(7,) + t[1:]], [], [])
        with pytest.raises(TypeError, match="a scheduled request is an 8-tuple"):
            sc.build_connector_meta(1, [t[:7]], [], [])
        with pytest.raises(TypeError, match="preempted must be a str, got NoneType"):
            sc.build_connector_meta(1, [t], [], [None])
        # Nothing above reached the planner: the step is still the first.
        meta = sc.vllm_build_connector_meta(1, output(), {"a": r})
        assert [j.request_id for j in meta.stores] == ["a"]
    finally:
        sc.shutdown()


def test_vllms_request_blocks_and_output_are_read_as_the_plain_calls_read_them():
    by_vllm, plain = connector("vllm-calls"), connector("plain-calls")
    try:
        r = request("a", 4, {"do_remote_decode": False})
        assert by_vllm.vllm_get_num_new_matched_tokens(r, 0) == \
            plain.get_num_new_matched_tokens("a", r.block_hashes, r.num_tokens, 0)
        blocks = v.KVCacheBlocks(([v.KVCacheBlock(b, None if b == 4 else b"h", False)
                                   for b in (1, 2, 3, 4)],))
        by_vllm.vllm_update_state_after_alloc(r, blocks, 0)
        plain.update_state_after_alloc("a", r.block_hashes, r.num_tokens, [1, 2, 3, 4],
                                       [True, True, True, False], 0)
        assert by_vllm.tables() == plain.tables()
        # vLLM's finished sets go in; the planner's (None when empty) come back over them, and
        # invalid block ids are added to vLLM's own.
        out = v.KVConnectorOutput({"x"}, None, {99})
        by_vllm.vllm_update_connector_output(out)
        plain.apply_request_output(["x"], [])
        update = plain.update_connector_output()
        assert out.finished_sending == (set(update.finished_sending) or None)
        assert out.finished_recving == (set(update.finished_recving) or None)
        assert out.invalid_block_ids == {99} | set(update.invalid_block_ids)

        # (Blocks are read only for a load: num_external_tokens > 0.)
        with pytest.raises(ValueError, match="KVCacheBlocks.blocks must hold one KV-cache group"):
            by_vllm.vllm_update_state_after_alloc(r, v.KVCacheBlocks(([], [])), BLOCK)
        with pytest.raises(TypeError, match="KVCacheBlock.block_id must be an int, got str"):
            by_vllm.vllm_update_state_after_alloc(
                r, v.KVCacheBlocks(([v.KVCacheBlock("1", None, False)],)), BLOCK)
        with pytest.raises(TypeError, match="Request.request_id must be a str, got int"):
            by_vllm.vllm_get_num_new_matched_tokens(v.Request(7, [], 0, 0, None), 0)
        with pytest.raises(TypeError, match="finished_recving must be a str, got int"):
            by_vllm.vllm_update_connector_output(v.KVConnectorOutput(None, [1]))
    finally:
        by_vllm.shutdown()
        plain.shutdown()


class CountingRequest(v.Request):
    """vLLM's Request that counts the reads of each of its fields (not the stand-in's own
    underscored ones, such as the num_tokens property's)."""

    def __getattribute__(self, name):
        if not name.startswith("_"):
            reads = object.__getattribute__(self, "__dict__").setdefault("reads", {})
            reads[name] = reads.get(name, 0) + 1
        return object.__getattribute__(self, name)


def fields_read(r: CountingRequest) -> dict:
    """The reads of each of vLLM's fields of `r` since r.reads was last emptied."""
    return {name: n for name, n in r.reads.items() if name != "reads"}


def test_a_requests_block_hashes_and_params_are_read_once_per_request_object():
    by_vllm, by_tuples = connector("once"), connector("once-tuples")
    try:
        r = CountingRequest("a", [b"a0", b"a1"], 2 * BLOCK, 0, None)
        reqs = {"a": r}
        by_vllm.vllm_get_num_new_matched_tokens(r, 0)
        by_tuples.get_num_new_matched_tokens("a", r.block_hashes, r.num_tokens, 0)
        hashes = r.block_hashes
        counted = {}  # the reads vllm_build_connector_meta makes
        for step in range(1, 6):
            new = [("a", [1, 2])] if step == 1 else []
            cached = [] if step == 1 else [("a", [2 + step] if step % 2 else None)]
            if step > 1:  # decoding: one token a step, a block (and its hash) every other
                r.num_computed_tokens = r.num_tokens
                r.num_tokens += BLOCK // 2
                if r.num_tokens % BLOCK == 0:
                    hashes.append(f"a{len(hashes)}".encode())
            scheduled = {"a": r.num_tokens - r.num_computed_tokens}
            out = v.SchedulerOutput(
                [v.NewRequestData(rid, (ids,), r.num_computed_tokens) for rid, ids in new],
                v.CachedRequestData([rid for rid, _ in cached], set(),
                                    [None if ids is None else (ids,) for _, ids in cached],
                                    [r.num_computed_tokens for _ in cached]),
                scheduled, set(), [])
            r.reads = {}
            got = by_vllm.vllm_build_connector_meta(step, out, reqs)
            for name, n in object.__getattribute__(r, "reads").items():
                counted[name] = counted.get(name, 0) + n
            want = by_tuples.build_connector_meta(
                step, [as_tuple(r, scheduled["a"], ids, False) for _, ids in new],
                [as_tuple(r, scheduled["a"], ids, False) for _, ids in cached], [])
            assert jobs(got) == jobs(want)
        # The list vLLM extends in place is read through, its blocks stored as they fill.
        assert by_vllm.stats() == by_tuples.stats()
        assert by_vllm.stats()["store_blocks"] == 4
        # Neither block_hashes nor kv_transfer_params again (the match read them); nor
        # num_computed_tokens (the SchedulerOutput's); num_tokens when the request is new (step
        # 1) and when computed + scheduled reaches a block past the count read last (steps 3 and
        # 5: 48 and 64 tokens), not in steps 2 and 4 (40 and 56, in the same block).
        assert counted == {"num_tokens": 3}
        # Another Request object for the same id is read anew.
        again = CountingRequest("a", r.block_hashes, r.num_tokens, r.num_computed_tokens,
                                {"do_remote_decode": True})
        out = v.SchedulerOutput([], v.CachedRequestData(["a"], set(), [None],
                                                        [again.num_computed_tokens]),
                                {"a": 1}, set(), [])
        by_vllm.vllm_build_connector_meta(6, out, {"a": again})
        assert again.reads["block_hashes"] == 1 and again.reads["kv_transfer_params"] == 1
    finally:
        by_vllm.shutdown()
        by_tuples.shutdown()


class GuardedBlock:
    """A KVCacheBlock (vLLM's fields) of which only the fields named in `readable` may be read."""

    def __init__(self, block_id: int, block_hash, is_null: bool, readable: tuple = ()):
        self._fields = {"block_id": block_id, "block_hash": block_hash, "is_null": is_null}
        self._readable = readable

    def __getattr__(self, name):
        if name in self._readable:
            return self._fields[name]
        raise AssertionError(f"KVCacheBlock.{name} of block {self._fields['block_id']} read")


class Unreadable:
    """An object none of whose fields may be read."""

    def __getattr__(self, name):
        raise AssertionError(f"{name} read")


def stored_prefix(sc: kvconnect.SchedulerConnector, hashes: list) -> None:
    """Request "a" of `hashes` stored into the CPU pool (step 1), then finished."""
    n = len(hashes)
    sc.get_num_new_matched_tokens("a", hashes, n * BLOCK, 0)
    meta = sc.build_connector_meta(
        1, [("a", hashes, n * BLOCK, 0, n * BLOCK, list(range(1, n + 1)), False, False)], [], [])
    sc.apply_job_results(1, [(j.id, "store", True) for j in meta.stores])
    sc.update_connector_output()
    sc.request_finished("a")


def test_a_load_reads_only_the_blocks_it_fills_and_gets_the_answer_of_the_whole_table():
    """R1's update_state_after_alloc reads block_hash (and whether a block is null) up to the
    first block a load fills, and block_id from there to num_gpu_blocks (of num_computed +
    num_external tokens); the binding reads no more, and the planner answers as it does for the
    whole table: the same load, and on its failure the same invalid blocks."""
    by_vllm, plain = connector("load-reads"), connector("load-reads-plain")
    try:
        prefix = [b"p%d" % b for b in range(4)]
        hashes = prefix + [b"b%d" % b for b in range(4)]
        r = CountingRequest("b", list(hashes), len(hashes) * BLOCK, 32, None)
        for sc in (by_vllm, plain):
            stored_prefix(sc, prefix)
        # 2 blocks computed on the GPU, the next 2 of the CPU pool's prefix to load.
        assert by_vllm.vllm_get_num_new_matched_tokens(r, 32) == (32, True)
        assert plain.get_num_new_matched_tokens("b", hashes, r.num_tokens, 32) == (32, True)
        # The null block (0), a hashed one, then the first to fill (6) and the last (7): 4 of
        # num_gpu_blocks; the 4 blocks after them are never read.
        blocks = v.KVCacheBlocks(([GuardedBlock(0, None, True, ("block_hash", "block_id")),
                                   GuardedBlock(5, b"h", False, ("block_hash",)),
                                   GuardedBlock(6, None, False, ("block_hash", "block_id")),
                                   GuardedBlock(7, None, False, ("block_id",))] +
                                  [GuardedBlock(b, None, False) for b in range(8, 12)],))
        r.reads = {}
        by_vllm.vllm_update_state_after_alloc(r, blocks, 32)
        # The Request object of the last call: only num_tokens is read again.
        assert fields_read(r) == {"num_tokens": 1}
        plain.update_state_after_alloc("b", hashes, r.num_tokens, [0, 5, 6, 7, 8, 9, 10, 11],
                                       [False, True] + [False] * 6, 32)
        assert by_vllm.tables() == plain.tables()
        metas = [sc.build_connector_meta(2, [], [], []) for sc in (by_vllm, plain)]
        assert jobs(metas[0]) == jobs(metas[1])
        assert [list(j.gpu_blocks) for j in metas[0].loads] == [[6, 7]]
        updates = []
        for sc, meta in zip((by_vllm, plain), metas):
            sc.apply_job_results(2, [(j.id, "load", False) for j in meta.loads])
            updates.append(sc.update_connector_output())
        for u in updates:
            assert (list(u.finished_recving), sorted(u.invalid_block_ids)) == (["b"], [6, 7])
    finally:
        by_vllm.shutdown()
        plain.shutdown()


def test_without_tokens_to_load_no_block_is_read():
    """R1's update_state_after_alloc returns at once when num_external_tokens is 0."""
    sc = connector("no-load")
    try:
        r = request("a", 4)
        assert sc.vllm_get_num_new_matched_tokens(r, 0) == (0, False)
        sc.vllm_update_state_after_alloc(r, Unreadable(), 0)
        # A Request object not seen before (another request's lookup came between) is read.
        other = request("a", 4)
        sc.vllm_update_state_after_alloc(other, Unreadable(), 0)
        meta = sc.vllm_build_connector_meta(
            1, v.SchedulerOutput([v.NewRequestData("a", ([1, 2, 3, 4],), 0)],
                                 v.CachedRequestData([], set(), [], []), {"a": 64}, set(), []))
        assert [j.request_id for j in meta.stores] == ["a"]
    finally:
        sc.shutdown()


def test_a_request_seen_before_is_read_for_its_id_and_num_tokens_only():
    sc = connector("seen")
    try:
        a = CountingRequest("a", [b"a0", b"a1"], 2 * BLOCK, 0, {"do_remote_decode": True})
        b = request("b", 2)
        assert sc.vllm_get_num_new_matched_tokens(a, 0) == (0, False)
        assert a.reads.get("block_hashes") == 1 and a.reads.get("kv_transfer_params") == 1
        assert sc.vllm_get_num_new_matched_tokens(b, 0) == (0, False)
        a.reads = {}
        assert sc.vllm_get_num_new_matched_tokens(a, 0) == (0, False)
        assert fields_read(a) == {"request_id": 1, "num_tokens": 1}
        a.reads = {}
        sc.vllm_update_state_after_alloc(a, Unreadable(), 0)
        assert fields_read(a) == {"num_tokens": 1}
        # Its fields of a wrong type are an error whichever call reads them first, and leave
        # nothing behind.
        with pytest.raises(TypeError, match="Request.num_tokens must be an int, got str"):
            sc.vllm_update_state_after_alloc(v.Request("c", [], "0", 0, None), Unreadable(), 0)
        with pytest.raises(TypeError, match="Request.kv_transfer_params must be a dict or None"):
            sc.vllm_update_state_after_alloc(v.Request("c", [], 0, 0, [1]), Unreadable(), 0)
        assert sc.tables()["binding_requests"] == 2
    finally:
        sc.shutdown()


def test_job_results_of_another_shape_are_an_error_naming_it():
    sc = connector("results")
    try:
        with pytest.raises(TypeError, match=r"a job result is a 3-tuple \(job id"):
            sc.apply_job_results(1, [(0, "store")])
        with pytest.raises(TypeError, match="a job id must be an int, got str"):
            sc.apply_job_results(1, [("0", "store", True)])
        with pytest.raises(ValueError, match='a job kind is "load" or "store", not "copy"'):
            sc.apply_job_results(1, [(0, "copy", True)])
        with pytest.raises(ValueError, match='not "cascade" \\(the file tier\'s jobs are reported '
                                             "by kvconnect's workers on the step channel\\)"):
            sc.apply_job_results(1, [(0, "cascade", True)])
        with pytest.raises(TypeError, match="results must be a list"):
            sc.apply_job_results(1, 7)
        assert sc.stats()["rejected_results"] == 0  # nothing reached the planner
    finally:
        sc.shutdown()


def test_int_hashes_of_any_width_below_2_to_the_128_come_back_as_themselves():
    sc = connector("wide")
    try:
        # (CPython before 3.12 keeps ints as 30-bit digits: 0 to 3 of them below 2**64.)
        hashes = [0, 5, 2**30 - 1, 2**30, 2**60 - 1, 2**60, 2**63 + 5, 2**64 - 1, 2**64,
                  2**64 + 7, 2**90 + 3, 2**128 - 1]
        assert sc.get_num_new_matched_tokens("a", hashes, len(hashes) * BLOCK, 0) == (0, False)
        meta = sc.build_connector_meta(
            1, [("a", hashes, len(hashes) * BLOCK, 0, len(hashes) * BLOCK,
                 list(range(1, len(hashes) + 1)), False, False)], [], [])
        sc.apply_job_results(1, [(j.id, "store", True) for j in meta.stores])
        sc.update_connector_output()
        stored = [h for kind, hs, _ in sc.take_events() if kind == "stored" for h in hs]
        assert stored == hashes
    finally:
        sc.shutdown()


def test_num_tokens_read_only_when_a_block_may_complete_plans_what_reading_it_always_plans():
    """The binding reads Request.num_tokens again only for a new or resumed request, or when
    computed + scheduled tokens reach an offloaded block past the count it read last
    (step_requests::read_vllm): over random schedules (chunked prefill, several tokens a step,
    computed + scheduled above num_tokens as with vLLM's async scheduling, requests idle for a
    while, preempted and resumed) it plans exactly what the tuples, which pass num_tokens every
    step, plan."""
    import random
    rng = random.Random(24)
    by_vllm, by_tuples = connector("lazy"), connector("lazy-tuples")
    try:
        reqs, blocks, next_block, paused = {}, {}, [1], set()

        def grow(r, n):
            r.num_tokens += n
            while len(r.block_hashes) < r.num_tokens // BLOCK:
                r.block_hashes.append(f"{r.request_id}-{len(r.block_hashes)}".encode())

        def give_blocks(rid, upto):
            fresh = []
            while len(blocks[rid]) * BLOCK < upto:
                blocks[rid].append(next_block[0])
                fresh.append(next_block[0])
                next_block[0] += 1
            return fresh

        for step in range(1, 300):
            new, cached, resumed, scheduled, preempted = [], [], set(), {}, []
            if len(reqs) < 6 and rng.random() < 0.3:
                rid = f"q{step}"
                r = v.Request(rid, [], 0, 0, None)
                grow(r, rng.randrange(1, 5 * BLOCK))
                by_tuples.get_num_new_matched_tokens(rid, r.block_hashes, r.num_tokens, 0)
                by_vllm.vllm_get_num_new_matched_tokens(r, 0)
                reqs[rid], blocks[rid] = r, []
                n = min(r.num_tokens, rng.choice([BLOCK, 3 * BLOCK, 1 << 20]))
                give_blocks(rid, n)
                new.append((rid, list(blocks[rid])))
                scheduled[rid] = n
            for rid, r in list(reqs.items()):
                if any(rid == x for x, _ in new):
                    continue
                roll = rng.random()
                if roll < 0.05:  # preempted: its blocks freed, computed again when resumed
                    preempted.append(rid)
                    r.num_computed_tokens = 0
                    blocks[rid] = []
                    paused.add(rid)
                    continue
                if roll < 0.25:
                    continue  # not scheduled this step
                if rid in paused:
                    paused.discard(rid)
                    resumed.add(rid)
                if r.num_computed_tokens >= r.num_tokens:
                    grow(r, rng.choice([1, 1, 1, 2, 4]))  # tokens sampled since
                left = r.num_tokens - r.num_computed_tokens
                n = rng.choice([1, 1, 2, 3, BLOCK, left])
                if rng.random() < 0.2:
                    n += rng.randrange(1, 2 * BLOCK)  # async: beyond the known tokens
                fresh = give_blocks(rid, r.num_computed_tokens + n)
                cached.append((rid, list(blocks[rid]) if rid in resumed else (fresh or None)))
                scheduled[rid] = n
            got, want = plan_both(by_vllm, by_tuples, step, reqs, new, cached, resumed, scheduled,
                                  preempted)
            assert jobs(got) == jobs(want), f"step {step}"
            done = [(j.id, j.kind, True) for j in list(want.loads) + list(want.stores)]
            for sc in (by_vllm, by_tuples):
                sc.apply_job_results(step, done)
                sc.update_connector_output()
            for rid, _ in new + cached:  # vLLM advances computed after building the metadata
                r = reqs[rid]
                r.num_computed_tokens = min(r.num_computed_tokens + scheduled[rid], r.num_tokens)
            for rid in [rid for rid, r in reqs.items()
                        if r.num_tokens > 12 * BLOCK and rid not in paused]:
                for sc in (by_vllm, by_tuples):
                    sc.request_finished(rid)
                del reqs[rid]
        stats = by_vllm.stats()
        assert stats == by_tuples.stats()
        assert stats["store_blocks"] > 50
    finally:
        by_vllm.shutdown()
        by_tuples.shutdown()


def test_without_a_requests_dict_the_requests_kept_since_the_match_plan_the_same():
    """vllm_build_connector_meta(step, out) reads each scheduled request's Request from the
    binding (the one last passed to a vllm_* call, until request_finished): the same plan as the
    dict gives, whether num_scheduled_tokens lists the running requests in req_ids' order (vLLM's
    scheduler) or not, and whether the ids are the Requests' own strs or equal ones."""
    kept, by_dict = connector("kept"), connector("dict")
    try:
        reqs = {rid: request(rid, 2) for rid in ("ra", "rb", "rc")}
        for r in reqs.values():
            for sc in (kept, by_dict):
                assert sc.vllm_get_num_new_matched_tokens(r, 0) == (0, False)
        new = [("ra", [1, 2]), ("rb", [3, 4]), ("rc", [5, 6])]

        def step_output(step: int):
            if step == 1:
                return v.SchedulerOutput([v.NewRequestData(rid, (ids,), 0) for rid, ids in new],
                                         v.CachedRequestData([], set(), [], []),
                                         {rid: 32 for rid in reqs}, set(), [])
            for r in reqs.values():  # decoding: one token a step, a block every 16
                r.num_computed_tokens = r.num_tokens
                r.num_tokens += 1
                if r.num_tokens % BLOCK == 0:
                    r.block_hashes.append(f"{r.request_id}{len(r.block_hashes)}".encode())
            ids = [r.request_id for r in reqs.values()]
            if step % 3 == 0:  # equal strs, not the Requests' own
                ids = ["".join(list(rid)) for rid in ids]
                assert all(i is not r.request_id for i, r in zip(ids, reqs.values()))
            order = ids if step % 2 else list(reversed(ids))
            new_blocks = [([7 + step],) if step % 16 == 0 else None for _ in ids]
            computed = [r.num_computed_tokens for r in reqs.values()]
            return v.SchedulerOutput([], v.CachedRequestData(ids, set(), new_blocks, computed),
                                     {rid: 1 for rid in order}, set(), [])

        for step in range(1, 40):
            out = step_output(step)
            got = kept.vllm_build_connector_meta(step, out)
            want = by_dict.vllm_build_connector_meta(step, out, reqs)
            assert jobs(got) == jobs(want)
            done = [(j.id, j.kind, True) for j in list(want.loads) + list(want.stores)]
            for sc in (kept, by_dict):
                sc.apply_job_results(step, done)
                sc.update_connector_output()
        assert kept.stats() == by_dict.stats()
        assert kept.stats()["store_blocks"] > 6

        # A request finished, or only ever passed as a str, has no Request here.
        kept.request_finished("rc")
        kept.get_num_new_matched_tokens("rd", [b"rd0"], BLOCK, 0)
        for rid in ("rc", "rd"):
            out = v.SchedulerOutput([], v.CachedRequestData([rid], set(), [None], [0]),
                                    {rid: 1}, set(), [])
            with pytest.raises(KeyError, match=f"request {rid} is scheduled but was never "
                                               "passed to get_num_new_matched_tokens"):
                kept.vllm_build_connector_meta(40, out)
        with pytest.raises(TypeError, match="req_id must be a str, got int"):
            kept.vllm_build_connector_meta(
                40, v.SchedulerOutput([], v.CachedRequestData([7], set(), [None], [0]), {7: 1},
                                      set(), []))
    finally:
        kept.shutdown()
        by_dict.shutdown()


def test_ints_are_read_as_themselves_whatever_their_size_in_digits():
    """0, one 30-bit digit, two and three digits (CPython's int layout), a bool and an int
    subclass: each block id comes back in the store job as the same int; 2**32 is refused."""
    sc = connector("ints")
    try:
        class Id(int):
            pass

        ids = [0, 7, 2**30 - 1, 2**30, 2**32 - 1, True, Id(12)]
        hashes = [f"h{b}".encode() for b in range(len(ids))]
        sc.get_num_new_matched_tokens("a", hashes, len(ids) * BLOCK, 0)
        t = ("a", hashes, len(ids) * BLOCK, 0, len(ids) * BLOCK, ids, False, False)
        with pytest.raises(ValueError, match=r"block_ids must be in \[0, 2\*\*32\)"):
            sc.build_connector_meta(1, [t[:5] + ([1, 2**32],) + t[6:]], [], [])
        meta = sc.build_connector_meta(1, [t], [], [])
        stored = [b for j in meta.stores for b in j.gpu_blocks]
        assert stored == [int(b) for b in ids if b != 0]
    finally:
        sc.shutdown()


def test_request_finished_reads_the_id_as_a_str_of_any_length():
    """vLLM's ids are long ("cmpl-<uuid>-0"): such a request, its store in flight, is finished
    with its blocks held; a second finish is no longer known; an id that is not a str is a
    TypeError naming req_id."""
    sc = connector("finish")
    try:
        rid = "cmpl-" + "0123456789abcdef" * 2 + "-0"
        hashes = [f"{rid}{b}".encode() for b in range(2)]
        sc.get_num_new_matched_tokens(rid, hashes, 2 * BLOCK, 0)
        meta = sc.build_connector_meta(
            1, [(rid, hashes, 2 * BLOCK, 0, 2 * BLOCK, [1, 2], False, False)], [], [])
        assert [j.request_id for j in meta.stores] == [rid]
        assert sc.tables()["binding_requests"] == 1
        assert sc.request_finished(rid) is True  # its store is in flight: blocks held
        assert sc.tables()["binding_requests"] == 0
        with pytest.raises(TypeError, match="req_id must be a str, got int"):
            sc.request_finished(7)
    finally:
        sc.shutdown()
