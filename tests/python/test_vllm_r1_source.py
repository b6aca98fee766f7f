"""The benchmark's "r1_source" path (tests/bench/vllm_r1_source.py: vLLM R1's own connector run
from a vLLM source tree, with stand-ins for the engine modules it imports for type names)
against vLLM R1's recorded answers: every connector trace the repository carries is replayed
through it as test_reference_connector.py replays the re-write, and every answer must equal
vLLM's. This checks that the stand-ins change nothing of what vLLM's code computes.

It needs vLLM's source, which the repository does not carry: KVCONNECT_VLLM_SOURCE names a
tree of vLLM at R1 (docs/benchmarks.md, "vLLM's own connector as the baseline"). Without it the
tests are skipped with that reason; ctest does not run this file (tests/python/CMakeLists.txt).
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

SOURCE = os.environ.get("KVCONNECT_VLLM_SOURCE")
if not SOURCE:
    pytest.skip("KVCONNECT_VLLM_SOURCE (a vLLM source tree at R1) is not set",
                allow_module_level=True)

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "scheduler"))
sys.path.insert(0, str(TESTS / "bench"))
from connector_replay_check import CALLS, norm, read_trace  # noqa: E402
from connector_trace_engine import TRACE_FILES, TRACES, TraceEngine, replay_trace  # noqa: E402
from kvconnect.vllm import BlockRemoved, BlockStored  # noqa: E402
import vllm_r1_source as src  # noqa: E402

MODULES = src.load(SOURCE, BlockStored, BlockRemoved)


def job_json(req_id: str, cpu, gpu) -> dict:
    return {"req": req_id, "cpu": cpu.block_ids.tolist(), "gpu": gpu.block_ids.tolist(),
            "group_sizes": list(gpu.group_sizes), "block_indices": list(gpu.block_indices)}


class Replay(TraceEngine):
    """The engine's side of one trace through vLLM's own connector."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.connector = src.OffloadingConnector(MODULES, src.Spec(
            MODULES, cfg["gpu_block_size"], cfg["num_cpu_blocks"],
            cfg["enable_kv_cache_events"], block_size_factor=cfg["block_size_factor"],
            hash_block_size=cfg["hash_block_size"],
            enable_prefix_caching=cfg["enable_prefix_caching"],
            eviction_policy=cfg["eviction_policy"], store_threshold=cfg["store_threshold"],
            max_tracker_size=cfg["max_tracker_size"] or 64_000))

    def build_connector_meta(self, o: dict):
        meta = self.connector.build_connector_meta(self.scheduler_output(o))
        return {"load": [job_json(r, cpu, gpu) for r, (cpu, gpu) in meta.reqs_to_load.items()],
                "store": [job_json(r, cpu, gpu) for r, (gpu, cpu) in meta.reqs_to_store.items()],
                "flush": list(meta.reqs_to_flush or ())}

    def take_events(self, o: dict):
        out = []
        for e in self.connector.take_events():  # vLLM's generator, drained as vLLM drains it
            event = {"type": type(e).__name__, **dataclasses.asdict(e)}
            event["block_hashes"] = [int.from_bytes(h, "big") for h in event["block_hashes"]]
            out.append(event)
        return out


def test_the_repository_carries_connector_traces():
    assert TRACE_FILES, f"no connector traces in {TRACES}"


@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: p.name.split(".")[0])
def test_vllms_own_connector_gives_its_recorded_answers(path: Path):
    trace = read_trace(str(path))
    assert trace[0]["op"] == "config"
    mismatches, answers = replay_trace(Replay(trace[0]), trace, CALLS, norm)
    assert not mismatches, f"{len(mismatches)} of {answers} answers differ:\n" + \
        "\n".join(mismatches[:5])
    assert answers > 0
