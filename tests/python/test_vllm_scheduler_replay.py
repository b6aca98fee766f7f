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
from connector_trace_engine import TRACE_FILES, TRACES, TraceEngine, replay_trace  # noqa: E402
from kvconnect.vllm import BlockStored, KVConnectorRole, KvconnectConnector

def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


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


class Replay(TraceEngine):
    """The engine's side of one trace through kvconnect.vllm."""

    def __init__(self, cfg: dict, instance: str):
        super().__init__()
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
        self.store_jobs: set[int] = set()

    def build_connector_meta(self, o: dict):
        out = self.scheduler_output(o)
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
    try:
        mismatches, answers = replay_trace(replay, trace, CALLS, norm, json.dumps)
    finally:
        replay.connector.shutdown()
    assert not mismatches, f"{len(mismatches)} of {answers} answers differ:\n" + \
        "\n".join(mismatches[:5])
    assert answers > 0
    assert not segment.exists(), "the connector's shutdown leaves no shm segment"
