"""The benchmarks' baseline, tests/bench/reference_connector.py (vLLM R1's
OffloadingConnectorScheduler written in Python over reference_manager.py), against vLLM R1's
own answers: every connector trace the repository carries (tests/scheduler/connector_traces) is
replayed through it with the stand-in vLLM objects, and every answer must equal vLLM's recorded
one under the trace format's comparison rules (connector_replay_check.norm: events merged by
type, stored hashes sorted, diagnostic fields dropped). This is what makes
tests/bench/python_scheduler_bench.py's "r1" path vLLM's own connector's work.

As vLLM's worker would: jobs complete when the trace's finished_sending / finished_recving say
so (passed to update_connector_output); a preempted request's stores complete inside
build_connector_meta (the connector's own doing in R1). The trace's `out`, `calls` and `state`
are never given to the connector.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import vllm_standins as v

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "scheduler"))
sys.path.insert(0, str(TESTS / "bench"))
from connector_replay_check import CALLS, norm, read_trace  # noqa: E402
import reference_connector as rc  # noqa: E402

TRACES = Path(os.environ.get("KVC_CONNECTOR_TRACES", TESTS / "scheduler" / "connector_traces"))
TRACE_FILES = sorted(p for p in TRACES.glob("*.jsonl*") if p.suffix in (".jsonl", ".gz"))


def hash_bytes(h: int) -> bytes:
    return h.to_bytes(8, "big")  # how vLLM sees a trace's hash


def job_json(req_id: str, cpu, gpu) -> dict:
    return {"req": req_id, "cpu": cpu.block_ids.tolist(), "gpu": gpu.block_ids.tolist(),
            "group_sizes": list(gpu.group_sizes), "block_indices": list(gpu.block_indices)}


def spec_of(cfg: dict) -> rc.OffloadingSpec:
    return rc.OffloadingSpec(
        gpu_block_size=(cfg["gpu_block_size"],), block_size_factor=cfg["block_size_factor"],
        hash_block_size=cfg["hash_block_size"], num_cpu_blocks=cfg["num_cpu_blocks"],
        enable_prefix_caching=cfg["enable_prefix_caching"],
        eviction_policy=cfg["eviction_policy"], store_threshold=cfg["store_threshold"],
        max_tracker_size=cfg["max_tracker_size"] or 64_000,
        enable_events=cfg["enable_kv_cache_events"])


class Replay:
    """The engine's side of one trace: its request table and the stand-in objects."""

    def __init__(self, cfg: dict):
        self.connector = rc.OffloadingConnector(spec_of(cfg))
        self.requests: dict[str, v.Request] = {}

    def add_request(self, o: dict) -> None:
        self.requests[o["req"]] = v.Request(o["req"], [hash_bytes(h) for h in o["block_hashes"]],
                                            o["num_tokens"], 0, o["kv_transfer_params"])

    def append_tokens(self, o: dict) -> None:
        r = self.requests[o["req"]]
        r.num_tokens = o["num_tokens"]
        r.block_hashes.extend(hash_bytes(h) for h in o["new_block_hashes"])

    def get_num_new_matched_tokens(self, o: dict):
        r = self.requests[o["req"]]
        assert r.num_tokens == o["num_tokens"]
        n, is_async = self.connector.get_num_new_matched_tokens(r, o["num_computed_tokens"])
        return [n, is_async]

    def update_state_after_alloc(self, o: dict):
        (group,) = o["blocks"]
        blocks = v.KVCacheBlocks(([v.KVCacheBlock(b, b"cached" if hashed else None, b == 0)
                                   for b, hashed in group],))
        self.connector.update_state_after_alloc(self.requests[o["req"]], blocks,
                                                o["num_external_tokens"])
        return None

    def build_connector_meta(self, o: dict):
        for s in o["new"] + o["cached"]:
            r = self.requests[s["req"]]
            assert r.num_tokens == s["num_tokens"]
            r.num_computed_tokens = s["num_computed_tokens"]
        cached = v.CachedRequestData([s["req"] for s in o["cached"]],
                                     {s["req"] for s in o["cached"] if s["resumed"]},
                                     [s["new_block_ids"] for s in o["cached"]],
                                     [s["num_computed_tokens"] for s in o["cached"]])
        out = v.SchedulerOutput(
            [v.NewRequestData(s["req"], tuple(s["block_ids"]), s["num_computed_tokens"])
             for s in o["new"]], cached,
            {s["req"]: s["num_scheduled_tokens"] for s in o["new"] + o["cached"]},
            set(o["finished"]), list(o["preempted"]))
        meta = self.connector.build_connector_meta(out)
        return {"load": [job_json(r, cpu, gpu) for r, (cpu, gpu) in meta.reqs_to_load.items()],
                "store": [job_json(r, cpu, gpu) for r, (gpu, cpu) in meta.reqs_to_store.items()],
                "flush": list(meta.reqs_to_flush)}

    def request_finished(self, o: dict):
        r = self.requests.pop(o["req"])
        delay_free, params = self.connector.request_finished(r, o["block_ids"])
        return [delay_free, params]

    def update_connector_output(self, o: dict):
        self.connector.update_connector_output(
            v.KVConnectorOutput(list(o["finished_sending"]), list(o["finished_recving"])))
        return None

    def take_events(self, o: dict):
        return [dict(e, block_hashes=[int.from_bytes(h, "big") for h in e["block_hashes"]])
                for e in self.connector.take_events()]


def test_the_repository_carries_connector_traces():
    assert TRACE_FILES, f"no connector traces in {TRACES}"


@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: p.name.split(".")[0])
def test_reference_connector_gives_vllms_answers(path: Path):
    trace = read_trace(str(path))
    assert trace[0]["op"] == "config"
    replay = Replay(trace[0])
    mismatches = []
    answers = 0
    for i, line in enumerate(trace[1:], start=2):
        op = line["op"]
        given = {k: x for k, x in line.items() if k not in ("out", "calls")}
        if op in ("add_request", "append_tokens"):
            getattr(replay, op)(given)
        elif op in CALLS:
            got = getattr(replay, op)(given)
            answers += 1
            if norm(op, got) != norm(op, line["out"]):
                mismatches.append(f"trace line {i} ({op}):\n  got:  {norm(op, got)}\n"
                                  f"  want: {norm(op, line['out'])}")
    assert not mismatches, f"{len(mismatches)} of {answers} answers differ:\n" + \
        "\n".join(mismatches[:5])
    assert answers > 0
