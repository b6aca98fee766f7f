"""kvconnect.vllm.KvconnectConnector's observers, switched on through the `observe` section of
vLLM's kv_connector_extra_config (docs/observability.md): the scheduler role serves /metrics
with vLLM's offload series, publishes the CPU tier's KV events in vLLM's wire format (live and
through the replay endpoint), and every process writes its message trace, the scheduler its run
record, all as the user's private files. Driven end to end in vLLM's order (two worker
processes, TP=2, built first; vllm_engine.py): a request's blocks stored, then loaded for a
request sharing its prefix.

No waiting on time: the metrics are published at the end of each step call, the replay answer
ends with vLLM's end marker, the live stream with the AllBlocksCleared batch of shutdown; each
receive has a deadline that fails the test.
"""
from __future__ import annotations

import json
import os
import stat
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("torch")
zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

import vllm_engine as e  # noqa: E402

RECV_MS = int(e.REPLY_S * 1000)  # the deadline of one receive
END_SEQ = (1 << 64) - 1  # vLLM's replay end marker (-1)


def metrics(host: str, port: int) -> dict[str, float]:
    """GET /metrics: every sample line as {"name{labels}": value}."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=e.REPLY_S) as r:
        assert r.status == 200
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def recv_batch(sock) -> list[bytes]:
    if not sock.poll(RECV_MS):
        raise AssertionError(f"no KV-event message within {RECV_MS} ms")
    return sock.recv_multipart()


def decode(seq: bytes, payload: bytes) -> tuple[int, list]:
    """vLLM's KVEventBatch: the big-endian sequence number, msgpack [ts, [event, ...]]."""
    assert len(seq) == 8
    ts, events = msgpack.unpackb(payload, raw=False)[:2]
    assert isinstance(ts, float) and ts > 0
    return int.from_bytes(seq, "big"), events


def replay(dealer, start: int) -> dict[int, list]:
    """Every kept batch from `start` through the replay endpoint, up to vLLM's end marker."""
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    got = {}
    while True:
        empty, seq, payload = recv_batch(dealer)
        assert empty == b""
        if int.from_bytes(seq, "big") == END_SEQ:
            assert payload == b""
            return got
        n, events = decode(seq, payload)
        got[n] = events


def private_file(path: Path) -> None:
    assert path.is_file(), path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))


def trace_records(path: Path) -> list[dict]:
    private_file(path)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_metrics_kv_events_traces_and_record_through_the_extra_config(tmp_path: Path):
    engine_id = f"pytest-{os.getpid()}-observe"
    segment = e.segment_path(engine_id)
    trace_dir, record_dir = tmp_path / "trace", tmp_path / "record"
    metrics_port = e.free_port()  # fixed in the config (0 is off)
    extra = e.extra_config()
    extra["observe"] = {
        "metrics_port": metrics_port,
        "kv_events": {"endpoint": "tcp://127.0.0.1:*", "replay_endpoint": "tcp://127.0.0.1:*"},
        "trace": "messages", "trace_dir": str(trace_dir),
        "record": True, "record_dir": str(record_dir),
    }
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    dealer = ctx.socket(zmq.DEALER)
    for s in (sub, dealer):
        s.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    workers = e.Workers(engine_id, extra)
    sched = None
    try:
        workers.ready()
        sched = e.scheduler(engine_id, extra)
        sc = sched.scheduler
        assert sc.metrics_port == metrics_port
        assert sc.kv_events_endpoint.startswith("tcp://127.0.0.1:")
        assert not sc.kv_events_endpoint.endswith(":*")  # the bound port
        sub.connect(sc.kv_events_endpoint)
        dealer.connect(sc.kv_events_replay_endpoint)

        e.store_a(sched, workers)
        # Published at the end of each step call: a's store (4 blocks on both ranks) counted.
        m = metrics(sc.host, metrics_port)
        store_bytes = 4 * e.page_bytes() * e.LAYERS * e.TP
        assert m['kvconnect_jobs_completed_total{kind="store"}'] == 1
        assert m["vllm:kv_offload_store_bytes_total"] == store_bytes
        assert m['vllm:kv_offload_total_bytes_total{transfer_type="GPU_to_CPU"}'] == store_bytes
        assert m["kvconnect_world_size"] == e.TP
        assert m["kvconnect_ranks_alive"] == e.TP
        # With the stream on, the events go to it, not to take_events.
        assert sched.take_events() == []

        kv_out, _ = e.load_b(sched, workers)
        assert kv_out.finished_recving == {"b"}
        m = metrics(sc.host, metrics_port)
        assert m['kvconnect_jobs_completed_total{kind="load"}'] == 1
        assert m["vllm:kv_offload_load_bytes_total"] == store_bytes
        assert m['vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}'] == store_bytes
        assert m["kvconnect_lookup_hit_blocks_total"] == 4
        e.check_nothing_left(sched, workers)

        # Every batch so far, through the replay endpoint: one BlockStored of a's 4 blocks, each
        # hash the 128-bit block key as 16 bytes, medium CPU, the offloaded block's tokens.
        batches = replay(dealer, 0)
        assert sorted(batches) == list(range(len(batches)))
        events = [ev for n in sorted(batches) for ev in batches[n]]
        assert events == [["BlockStored", [int.from_bytes(h, "big").to_bytes(16, "big")
                                           for h in e.prefix_hashes()],
                           None, [], e.BLOCK, None, "CPU", None]]
        last = max(batches)

        sched.shutdown()
        # Live on the PUB socket: whatever of the batches above arrived equals the replay's,
        # then shutdown's AllBlocksCleared (the pool goes with the scheduler side).
        while True:
            topic, seq, payload = recv_batch(sub)
            assert topic == b""
            n, evs = decode(seq, payload)
            if n > last:
                assert (n, evs) == (last + 1, [["AllBlocksCleared"]])
                break
            assert evs == batches[n]
    finally:
        if sched is not None:
            sched.shutdown()
        workers.stop()
        sub.close()
        dealer.close()
        ctx.term()
    assert not segment.exists()

    # Traces, complete once each side ended (the scheduler side's connector object still
    # exists: its shutdown completed the file): the directory made private, a file per
    # process, each step's metadata sent by the scheduler and received by both ranks under the
    # same message id.
    assert stat.S_IMODE(trace_dir.stat().st_mode) == 0o700
    sched_trace = trace_records(trace_dir / f"scheduler-{os.getpid()}-node0.jsonl")
    sent = {r["msg"] for r in sched_trace if r["type"] == "metadata" and r["dir"] == "send"}
    assert sent == {f"metadata/{step}/r{rank}.0" for step in (1, 2, 3) for rank in range(e.TP)}
    for rank, p in enumerate(workers.procs):
        records = trace_records(trace_dir / f"worker-{p.pid}-r{rank}.0.jsonl")
        received = {r["msg"] for r in records
                    if r["type"] == "metadata" and r["dir"] == "receive"}
        assert received == {f"metadata/{step}/r{rank}.0" for step in (1, 2, 3)}
    assert {f.name for f in trace_dir.iterdir()} == \
        {f"scheduler-{os.getpid()}-node0.jsonl"} | \
        {f"worker-{p.pid}-r{rank}.0.jsonl" for rank, p in enumerate(workers.procs)}

    # The run record, for `kvconnect replay-run`.
    record = record_dir / f"scheduler-{os.getpid()}.kvcrec"
    private_file(record)
    assert record.read_bytes().startswith(b"KVCREC\n\0")
    assert stat.S_IMODE(record_dir.stat().st_mode) == 0o700


def test_vllms_own_metrics_get_each_ranks_store_and_load_through_vllms_stats_path():
    # vLLM's own log line and Prometheus series (no kvconnect observer on): each worker's
    # get_kv_connector_stats after its get_finished, vLLM's aggregation over the workers, the
    # scheduler side's added, the data serialised to the front end (vllm_engine.FrontEnd).
    engine_id = f"pytest-{os.getpid()}-vllm-stats"
    with e.engine(engine_id, e.extra_config()) as (sched, workers):
        assert sched.get_kv_connector_stats() is None  # only the workers' transfers count
        front = workers.front_end
        blocks_a, stored = e.store_a(sched, workers)
        rank_bytes = 4 * e.page_bytes() * e.LAYERS  # a's 4 blocks on one rank
        assert front.logged.data.keys() == {"GPU_to_CPU"}
        assert [b for b, _ in front.logged.data["GPU_to_CPU"]] == [rank_bytes] * e.TP
        e.load_b_checked(sched, workers, blocks_a, stored)
        e.check_nothing_left(sched, workers)

    summary = front.logged.reduce()
    assert summary.keys() == {"GPU_to_CPU_total_bytes", "GPU_to_CPU_total_time",
                              "CPU_to_GPU_total_bytes", "CPU_to_GPU_total_time"}
    assert summary["GPU_to_CPU_total_bytes"] == summary["CPU_to_GPU_total_bytes"] == \
        e.TP * rank_bytes
    seconds = {t: [s for _, s in front.logged.data[t]] for t in ("GPU_to_CPU", "CPU_to_GPU")}
    assert all(s > 0 for ops in seconds.values() for s in ops)  # each rank's copy, timed
    assert summary["CPU_to_GPU_total_time"] == pytest.approx(sum(seconds["CPU_to_GPU"]))

    m = front.metrics
    # R1's series, by transfer type; one observation per rank's job.
    for transfer_type, key in (("GPU_to_CPU", "store"), ("CPU_to_GPU", "load")):
        labels = ("m", "0", transfer_type)
        assert sum(m["vllm:kv_offload_total_bytes"].values[labels]) == e.TP * rank_bytes
        assert m["vllm:kv_offload_total_time"].values[labels] == seconds[transfer_type]
        assert m["vllm:kv_offload_size"].values[labels] == [rank_bytes] * e.TP
        # vLLM main's per-direction series carry the same observations.
        assert m[f"vllm:kv_offload_{key}_bytes"].values[("m", "0")] == [rank_bytes] * e.TP
        assert m[f"vllm:kv_offload_{key}_time"].values[("m", "0")] == seconds[transfer_type]
        assert m[f"vllm:kv_offload_{key}_size"].values[("m", "0")] == [rank_bytes] * e.TP
    assert m["vllm:kv_offload_size"].buckets == [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6,
                                                  100e6, 150e6, 200e6]
    assert m["vllm:kv_offload_total_bytes"].labelnames == ["model_name", "engine",
                                                           "transfer_type"]
    assert m["vllm:kv_offload_store_bytes"].labelnames == ["model_name", "engine"]
