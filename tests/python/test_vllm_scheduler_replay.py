"""kvconnect.vllm.KvconnectConnector (scheduler role) against vLLM R1's own
OffloadingConnectorScheduler: every connector trace the repository carries
(tests/scheduler/connector_traces, format: docs/planner.md) is replayed through the connector
with stand-in vLLM objects, and every answer must equal vLLM's recorded one under the trace
format's comparison rules (the same as tests/scheduler/connector_replay_check.py for
`kvconnect replay --connector`):

  - answers are compared field by field, in order, one per connector-call line;
  - BlockStored hashes are compared sorted; consecutive events of one type are merged;
  - diagnostic fields are not compared: update_state_after_alloc's out, a job's keys.

The test plays the workers' part as `kvconnect replay --connector` does: jobs complete when the
trace's finished_sending / finished_recving say so (vLLM's own sets, passed to
update_connector_output), and a preempted request's flushed store jobs right after
build_connector_meta (R1 completes them inside that call). The trace's `out`, `calls` and
`state` are never given to the connector.
"""
from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest

import vllm_standins as v

# The comparison rules of the C++ replay check (events merged by type, stored hashes sorted).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduler"))
from connector_replay_check import norm_events  # noqa: E402
from kvconnect.vllm import BlockStored, KVConnectorRole, KvconnectConnector

TRACES = Path(os.environ.get("KVC_CONNECTOR_TRACES",
                             Path(__file__).resolve().parents[1] / "scheduler" /
                             "connector_traces"))
TRACE_FILES = sorted(p for p in TRACES.glob("*.jsonl*") if p.suffix in (".jsonl", ".gz"))


def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def hash_bytes(h: int) -> bytes:
    return h.to_bytes(8, "big")  # how vLLM sees a trace's hash


def event_json(e) -> dict:
    if isinstance(e, BlockStored):
        return {"type": "BlockStored", "block_hashes": list(e.block_hashes),
                "parent_block_hash": e.parent_block_hash, "token_ids": list(e.token_ids),
                "block_size": e.block_size, "lora_id": e.lora_id, "medium": e.medium,
                "lora_name": e.lora_name, "extra_keys": e.extra_keys, "group_idx": e.group_idx}
    return {"type": "BlockRemoved", "block_hashes": list(e.block_hashes), "medium": e.medium,
            "group_idx": e.group_idx}


def job_json(j) -> dict:
    return {"req": j.request_id, "cpu": list(j.slots), "gpu": list(j.gpu_blocks),
            "group_sizes": list(j.group_sizes), "block_indices": list(j.block_indices)}


def norm(op: str, out):
    if op == "update_state_after_alloc":
        return None  # diagnostic
    if op == "build_connector_meta":
        return {"load": [{k: x for k, x in j.items() if k != "keys"} for j in out["load"]],
                "store": [{k: x for k, x in j.items() if k != "keys"} for j in out["store"]],
                "flush": out["flush"]}
    if op == "take_events":
        return norm_events(out)
    return out


class Replay:
    """The engine's side of one trace: its request table and the stand-in objects."""

    def __init__(self, cfg: dict, instance: str):
        extra = dict(cfg["kv_connector_extra_config"])
        # No deadlines: nothing completes by time while no worker is attached.
        extra["runtime"] = {"instance": instance, "job_timeout_ms": 0, "job_timeout_steps": 0}
        factor = cfg["block_size_factor"]
        # The GPU block's bytes that make vLLM's sizing give the trace's CPU blocks.
        page = extra["cpu_bytes_to_use"] // (cfg["num_cpu_blocks"] * factor)
        self.connector = KvconnectConnector(
            v.vllm_config(extra, instance, cfg["hash_block_size"], cfg["enable_prefix_caching"]),
            KVConnectorRole.SCHEDULER,
            v.kv_cache_config(cfg["num_gpu_blocks"], page, cfg["gpu_block_size"]))
        assert self.connector.scheduler.num_cpu_blocks == cfg["num_cpu_blocks"]
        self.requests: dict[str, v.Request] = {}
        self.store_jobs: set[int] = set()

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
        planned = self.connector.planned
        assert meta.step == planned.step
        self.store_jobs.update(j.id for j in planned.stores)
        # The workers' part: flushed stores complete now (R1 completes them inside the call).
        flushed = [(j, "store", True) for j in planned.flush if j in self.store_jobs]
        self.store_jobs.difference_update(j for j, _, _ in flushed)
        if flushed:
            self.connector.scheduler.apply_job_results(planned.step, flushed)
        return {"load": [job_json(j) for j in planned.loads],
                "store": [job_json(j) for j in planned.stores],
                "flush": list(planned.flush_requests)}

    def request_finished(self, o: dict):
        r = self.requests.pop(o["req"])
        delay_free, params = self.connector.request_finished(r, o["block_ids"])
        return [delay_free, params]

    def update_connector_output(self, o: dict):
        self.connector.update_connector_output(
            v.KVConnectorOutput(list(o["finished_sending"]), list(o["finished_recving"])))
        return None

    def take_events(self, o: dict):
        return [event_json(e) for e in self.connector.take_events()]


CALLS = ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
         "request_finished", "update_connector_output", "take_events")


def test_the_repository_carries_connector_traces():
    assert TRACE_FILES, f"no connector traces in {TRACES}"


@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: p.name.split(".")[0])
def test_replay_gives_vllms_answers(path: Path):
    trace = read_trace(path)
    assert trace[0]["op"] == "config"
    replay = Replay(trace[0], f"pytest-{os.getpid()}-{path.name.split('.')[0]}")
    segment = Path("/dev/shm") / replay.connector.scheduler.segment_name.lstrip("/")
    assert segment.exists()
    mismatches = []
    answers = 0
    try:
        for i, line in enumerate(trace[1:], start=2):
            op = line["op"]
            given = {k: x for k, x in line.items() if k not in ("out", "calls")}
            if op in ("add_request", "append_tokens"):
                getattr(replay, op)(given)
            elif op in CALLS:
                got = getattr(replay, op)(given)
                answers += 1
                if norm(op, got) != norm(op, line["out"]):
                    mismatches.append(f"trace line {i} ({op}):\n  got:  "
                                      f"{json.dumps(norm(op, got))}\n  want: "
                                      f"{json.dumps(norm(op, line['out']))}")
    finally:
        replay.connector.shutdown()
    assert not mismatches, f"{len(mismatches)} of {answers} answers differ:\n" + \
        "\n".join(mismatches[:5])
    assert answers > 0
    assert not segment.exists(), "the connector's shutdown leaves no shm segment"
