#!/usr/bin/env python3
"""A real subscriber of kvconnect's KV-event stream, written the way vLLM's consumers read vLLM's
own stream (vllm/distributed/kv_events.py): SUB socket, frames (topic, 8-byte big-endian seq,
msgpack payload), the payload decoded into vLLM's struct layout (array_like msgspec structs, the
event's tag first, trailing defaults omitted), gaps in the sequence detected and filled from the
ROUTER replay endpoint (DEALER: empty frame + 8-byte start seq; answers (empty, seq, payload)...,
then seq -1 with an empty payload).

Runs `kvconnect scheduler --smoke-steps N --serve-after-smoke` with one worker process, then
checks: every batch decodes; sequence numbers run 0..last without holes once gaps are filled
through the replay endpoint; the BlockStored events carry 16-byte hashes, medium "CPU" and the
offloaded block size. A gap is always exercised: either the subscriber really missed the first
batches (ZeroMQ's slow joiner), or it drops one received batch on purpose and treats it as lost.
Ends both processes and checks that the pool's shm segment is gone.

usage: subscriber_check.py KVCONNECT_BINARY
"""
import dataclasses
import json
import os
import signal
import subprocess
import sys

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


# vLLM's structs, field for field (declaration order); msgspec's array_like decoding maps the
# array after the tag onto them positionally, missing trailing fields take their defaults.
@dataclasses.dataclass
class BlockStored:
    block_hashes: list
    parent_block_hash: object
    token_ids: list
    block_size: int
    lora_id: object
    medium: object
    lora_name: object = None
    extra_keys: object = None
    group_idx: object = None


@dataclasses.dataclass
class BlockRemoved:
    block_hashes: list
    medium: object
    group_idx: object = None


@dataclasses.dataclass
class AllBlocksCleared:
    pass


TAGS = {c.__name__: c for c in (BlockStored, BlockRemoved, AllBlocksCleared)}


@dataclasses.dataclass
class KVEventBatch:
    ts: float
    events: list
    data_parallel_rank: object = None


def decode(payload):
    raw = msgpack.unpackb(payload, raw=False)
    assert isinstance(raw, list) and 2 <= len(raw) <= 3, raw
    batch = KVEventBatch(*raw)
    assert isinstance(batch.ts, float), batch.ts
    events = []
    for ev in batch.events:
        assert isinstance(ev, list) and ev and isinstance(ev[0], str), ev
        events.append(TAGS[ev[0]](*ev[1:]))
    batch.events = events
    return batch


def replay(ctx, endpoint, start):
    """(seq, payload) for every batch the publisher kept from `start` on."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        empty, seq, payload = dealer.recv_multipart()
        assert empty == b""
        if seq == END_SEQ:
            assert payload == b""
            break
        out.append((int.from_bytes(seq, "big"), payload))
    dealer.close()
    return out


def read_json_line(proc, event):
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("event") == event:
            return msg
    raise AssertionError(f"the scheduler ended before its {event!r} line")


def main():
    binary = sys.argv[1]
    instance = f"kvev{os.getpid()}"
    token = "kv-events-check"
    steps = 30
    common = ["--instance", instance, "--tp-size", "1", "--slots", "8", "--kv-page-bytes", "256",
              "--gpu-blocks", "16", "--block-factor", "2", "--kv-layers", "2", "--token", token]
    procs = []
    try:
        sched = subprocess.Popen(
            [binary, "scheduler", *common, "--smoke-steps", str(steps), "--serve-after-smoke",
             "--kv-events-endpoint", "tcp://127.0.0.1:*",
             "--kv-events-replay-endpoint", "tcp://127.0.0.1:*", "--kv-events-topic", "kvc"],
            stdout=subprocess.PIPE, text=True)
        procs.append(sched)
        listening = read_json_line(sched, "listening")
        pub_ep = listening["kv_events_endpoint"]
        replay_ep = listening["kv_events_replay_endpoint"]
        assert pub_ep.startswith("tcp://127.0.0.1:") and replay_ep.startswith("tcp://127.0.0.1:")

        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"kvc")
        sub.connect(pub_ep)

        worker = subprocess.Popen(
            [binary, "worker", *common, "--port", str(listening["port"]), "--rank", "0"],
            stdout=subprocess.DEVNULL)
        procs.append(worker)
        smoke = read_json_line(sched, "smoke")
        assert smoke["jobs_ok"] > 0, smoke

        # Everything the run published is kept (10,000 batches): the replay says how many.
        kept = replay(ctx, replay_ep, 0)
        assert kept, "no batch was published"
        last = kept[-1][0]
        assert [s for s, _ in kept] == list(range(last + 1)), "the replay buffer has holes"

        # Live: read until the last batch; detect gaps the way a vLLM consumer does.
        received = {}
        dropped = None
        expected = 0
        gaps = []
        while expected <= last:
            topic, seq_b, payload = sub.recv_multipart()
            assert topic == b"kvc" and len(seq_b) == 8
            seq = int.from_bytes(seq_b, "big")
            if dropped is None and not gaps and seq == expected and 1 <= seq < last:
                dropped = seq  # nothing missed so far: this one counts as lost
                continue
            if seq > expected:
                gaps.append((expected, seq))
            received[seq] = decode(payload)
            expected = seq + 1
        assert gaps, "no gap was detected"

        # Fill every gap from the replay endpoint.
        for start, end in gaps:
            for seq, payload in replay(ctx, replay_ep, start):
                if seq < end:
                    received[seq] = decode(payload)
        assert sorted(received) == list(range(last + 1)), (sorted(received), gaps)

        stored = removed = 0
        for seq in range(last + 1):
            for ev in received[seq].events:
                if isinstance(ev, BlockStored):
                    stored += len(ev.block_hashes)
                    assert ev.medium == "CPU" and ev.block_size == 8, ev
                    assert ev.parent_block_hash is None and ev.token_ids == [], ev
                    assert all(isinstance(h, bytes) and len(h) == 16 for h in ev.block_hashes)
                elif isinstance(ev, BlockRemoved):
                    removed += len(ev.block_hashes)
                    assert ev.medium == "CPU", ev
        assert stored > 0, "no BlockStored event"

        # At shutdown the tier is gone: one AllBlocksCleared batch follows.
        sched.send_signal(signal.SIGTERM)
        topic, seq_b, payload = sub.recv_multipart()
        final = decode(payload)
        assert int.from_bytes(seq_b, "big") == last + 1
        assert [type(e) for e in final.events] == [AllBlocksCleared], final
        assert sched.wait() == 0
        assert worker.wait() == 0
        sub.close()
        ctx.term()
        leftovers = [f for f in os.listdir("/dev/shm") if instance in f]
        assert not leftovers, leftovers
        print(f"kv events: {last + 1} batches, {stored} blocks stored, {removed} removed, "
              f"gaps filled by replay: {gaps}")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(main())
