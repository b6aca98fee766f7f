"""The benchmarks' baselines against vLLM R1's own answers: every connector trace the
repository carries (tests/scheduler/connector_traces) is replayed with the stand-in vLLM objects
through
- "rewrite": tests/bench/reference_connector.py (vLLM R1's OffloadingConnectorScheduler
  written in Python over reference_manager.py), python_scheduler_bench.py's "r1" path;
- "vllm_source": vLLM R1's own connector run from a vLLM source tree
  (tests/bench/vllm_r1_source.py, the "r1_source" path), when KVCONNECT_VLLM_SOURCE names one
  (docs/benchmarks.md, "The baseline"; a clone has none, so these are skipped with that reason):
  it checks that the stand-ins for vLLM's engine modules change nothing vLLM's code computes;
and every answer must equal vLLM's recorded one under the trace format's comparison rules
(connector_replay_check.norm: events merged by type, stored hashes sorted, diagnostic fields
dropped). This is what makes the benchmark's baselines vLLM's own connector's work.

As vLLM's worker would: jobs complete when the trace's finished_sending / finished_recving say
so (passed to update_connector_output); a preempted request's stores complete inside
build_connector_meta (the connector's own doing in R1). The trace's `out`, `calls` and `state`
are never given to the connector.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "scheduler"))
sys.path.insert(0, str(TESTS / "bench"))
from connector_replay_check import CALLS, norm, read_trace  # noqa: E402
import reference_connector as rc  # noqa: E402
import vllm_r1_source  # noqa: E402
from connector_trace_engine import TRACE_FILES, TRACES, TraceEngine, replay_trace  # noqa: E402

VLLM_SOURCE = os.environ.get("KVCONNECT_VLLM_SOURCE")
_vllm_modules = None  # vllm_r1_source.load's, loaded on first use


def job_json(req_id: str, cpu, gpu) -> dict:
    return {"req": req_id, "cpu": cpu.block_ids.tolist(), "gpu": gpu.block_ids.tolist(),
            "group_sizes": list(gpu.group_sizes), "block_indices": list(gpu.block_indices)}


def rewrite_connector(cfg: dict):
    return rc.OffloadingConnector(rc.OffloadingSpec(
        gpu_block_size=(cfg["gpu_block_size"],), block_size_factor=cfg["block_size_factor"],
        hash_block_size=cfg["hash_block_size"], num_cpu_blocks=cfg["num_cpu_blocks"],
        enable_prefix_caching=cfg["enable_prefix_caching"],
        eviction_policy=cfg["eviction_policy"], store_threshold=cfg["store_threshold"],
        max_tracker_size=cfg["max_tracker_size"] or 64_000,
        enable_events=cfg["enable_kv_cache_events"]))


def vllm_source_connector(cfg: dict):
    global _vllm_modules
    if _vllm_modules is None:
        from kvconnect.vllm import BlockRemoved, BlockStored
        _vllm_modules = vllm_r1_source.load(VLLM_SOURCE, BlockStored, BlockRemoved)
    return vllm_r1_source.connector(_vllm_modules, vllm_r1_source.Spec(
        _vllm_modules, cfg["gpu_block_size"], cfg["num_cpu_blocks"],
        cfg["enable_kv_cache_events"], block_size_factor=cfg["block_size_factor"],
        hash_block_size=cfg["hash_block_size"],
        enable_prefix_caching=cfg["enable_prefix_caching"],
        eviction_policy=cfg["eviction_policy"], store_threshold=cfg["store_threshold"],
        max_tracker_size=cfg["max_tracker_size"] or 64_000))


CONNECTORS = {"rewrite": rewrite_connector, "vllm_source": vllm_source_connector}


def event_json(e) -> dict:
    """An event as the traces hold it: the re-write yields dicts already, vLLM's code the
    BlockStored / BlockRemoved dataclasses."""
    event = e if isinstance(e, dict) else {"type": type(e).__name__, **dataclasses.asdict(e)}
    return dict(event, block_hashes=[int.from_bytes(h, "big") for h in event["block_hashes"]])


class Replay(TraceEngine):
    """The engine's side of one trace through a baseline connector."""

    def __init__(self, connector):
        super().__init__()
        self.connector = connector

    def build_connector_meta(self, o: dict):
        out = self.scheduler_output(o)
        meta = self.connector.build_connector_meta(out)
        return {"load": [job_json(r, cpu, gpu) for r, (cpu, gpu) in meta.reqs_to_load.items()],
                "store": [job_json(r, cpu, gpu) for r, (gpu, cpu) in meta.reqs_to_store.items()],
                "flush": list(meta.reqs_to_flush or ())}

    def take_events(self, o: dict):
        return [event_json(e) for e in self.connector.take_events()]


def test_the_repository_carries_connector_traces():
    assert TRACE_FILES, f"no connector traces in {TRACES}"


@pytest.mark.parametrize("name", CONNECTORS)
@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: p.name.split(".")[0])
def test_baseline_gives_vllms_answers(path: Path, name: str):
    if name == "vllm_source" and not VLLM_SOURCE:
        pytest.skip("KVCONNECT_VLLM_SOURCE (a vLLM source tree at R1) is not set")
    trace = read_trace(str(path))
    assert trace[0]["op"] == "config"
    mismatches, answers = replay_trace(Replay(CONNECTORS[name](trace[0])), trace, CALLS, norm)
    assert not mismatches, f"{len(mismatches)} of {answers} answers differ:\n" + \
        "\n".join(mismatches[:5])
    assert answers > 0
