"""The engine's side of a connector trace (tests/scheduler/connector_traces, format:
docs/planner.md), shared by the replays of the traces through vLLM-shaped connectors
(test_vllm_scheduler_replay.py: kvconnect.vllm; test_reference_connector.py: the benchmarks' R1
baseline): the request table, the stand-in vLLM objects each call is given, and the loop that
compares every answer with vLLM's recorded one. A replay subclasses TraceEngine with its
`connector` (vLLM's scheduler-role methods), build_connector_meta and take_events."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import vllm_standins as v

TRACES = Path(os.environ.get("KVC_CONNECTOR_TRACES",
                             Path(__file__).resolve().parents[1] / "scheduler" /
                             "connector_traces"))
TRACE_FILES = sorted(p for p in TRACES.glob("*.jsonl*") if p.suffix in (".jsonl", ".gz"))


def hash_bytes(h: int) -> bytes:
    return h.to_bytes(8, "big")  # how vLLM sees a trace's hash


class TraceEngine:
    """The engine's request table and the calls whose arguments are the trace's, as vLLM's
    objects."""

    connector: Any

    def __init__(self) -> None:
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

    def scheduler_output(self, o: dict) -> v.SchedulerOutput:
        """build_connector_meta's SchedulerOutput; the Requests' computed tokens set as vLLM's
        scheduler has them while it builds the metadata."""
        for s in o["new"] + o["cached"]:
            r = self.requests[s["req"]]
            assert r.num_tokens == s["num_tokens"]
            r.num_computed_tokens = s["num_computed_tokens"]
        cached = v.CachedRequestData([s["req"] for s in o["cached"]],
                                     {s["req"] for s in o["cached"] if s["resumed"]},
                                     [s["new_block_ids"] for s in o["cached"]],
                                     [s["num_computed_tokens"] for s in o["cached"]])
        return v.SchedulerOutput(
            [v.NewRequestData(s["req"], tuple(s["block_ids"]), s["num_computed_tokens"])
             for s in o["new"]], cached,
            {s["req"]: s["num_scheduled_tokens"] for s in o["new"] + o["cached"]},
            set(o["finished"]), list(o["preempted"]))

    def request_finished(self, o: dict):
        r = self.requests.pop(o["req"])
        delay_free, params = self.connector.request_finished(r, o["block_ids"])
        return [delay_free, params]

    def update_connector_output(self, o: dict):
        self.connector.update_connector_output(
            v.KVConnectorOutput(list(o["finished_sending"]), list(o["finished_recving"])))
        return None


def replay_trace(replay: TraceEngine, trace: list[dict], calls: tuple,
                 norm: Callable[[str, Any], Any], show: Callable[[Any], str] = str
                 ) -> tuple[list[str], int]:
    """Plays the trace's lines after its config through `replay`: the mismatching answers
    (normalised by `norm`, printed by `show`) and the number of answers compared."""
    mismatches = []
    answers = 0
    for i, line in enumerate(trace[1:], start=2):
        op = line["op"]
        given = {k: x for k, x in line.items() if k not in ("out", "calls")}
        if op in ("add_request", "append_tokens"):
            getattr(replay, op)(given)
        elif op in calls:
            got = getattr(replay, op)(given)
            answers += 1
            if norm(op, got) != norm(op, line["out"]):
                mismatches.append(f"trace line {i} ({op}):\n  got:  {show(norm(op, got))}\n"
                                  f"  want: {show(norm(op, line['out']))}")
    return mismatches, answers
