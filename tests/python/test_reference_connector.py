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

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "scheduler"))
sys.path.insert(0, str(TESTS / "bench"))
from connector_replay_check import CALLS, norm, read_trace  # noqa: E402
import reference_connector as rc  # noqa: E402
from connector_trace_engine import TRACE_FILES, TRACES, TraceEngine, replay_trace  # noqa: E402


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


class Replay(TraceEngine):
    """The engine's side of one trace through the reference connector."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.connector = rc.OffloadingConnector(spec_of(cfg))

    def build_connector_meta(self, o: dict):
        out = self.scheduler_output(o)
        meta = self.connector.build_connector_meta(out)
        return {"load": [job_json(r, cpu, gpu) for r, (cpu, gpu) in meta.reqs_to_load.items()],
                "store": [job_json(r, cpu, gpu) for r, (gpu, cpu) in meta.reqs_to_store.items()],
                "flush": list(meta.reqs_to_flush)}

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
    mismatches, answers = replay_trace(replay, trace, CALLS, norm)
    assert not mismatches, f"{len(mismatches)} of {answers} answers differ:\n" + \
        "\n".join(mismatches[:5])
    assert answers > 0
