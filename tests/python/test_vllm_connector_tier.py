"""kvconnect.vllm.KvconnectConnector with the file tier (docs/disk_tier.md) end to end across
processes (vllm_engine.py): the tier given in kv_connector_extra_config
(`offload: {secondary_tiers: [...]}`) reaches the scheduler side and both worker processes
(TP=2, CPU torch tensors). A CPU pool of four blocks cannot keep request a's blocks once another
request stores: a's blocks cascade to files in a pytest tmp dir, c evicts them from the pool,
and b, sharing a's prefix, is answered None (vLLM's "ask again") while the tier checks its
files and then promotes them into the pool, across steps; then a hit, and b's load is
byte-exact on both ranks against what a stored. The KV events carry the tier's blocks with
vLLM main's medium "STORAGE". Nothing is left behind (segment, processes, jobs); the tier's
files stay in the tmp dir, by design.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kvconnect  # noqa: E402
import vllm_engine as e  # noqa: E402
import vllm_standins as v  # noqa: E402
from kvconnect.vllm import BlockRemoved, BlockStored  # noqa: E402

POOL_BLOCKS = 4  # a's four blocks fill the pool; c's evict them


def hashes_of(n: int, first: int) -> list[bytes]:
    return [(first + i).to_bytes(8, "big") for i in range(n)]


def ints(hashes: list[bytes]) -> list[int]:
    return [int.from_bytes(h, "big") for h in hashes]


def tier_jobs(sched) -> list[tuple[str, list[int]]]:
    return [(j.kind, j.keys) for j in sched.planned.tier_jobs]


def event_hashes(events: list, kind: type, medium: str) -> list[int]:
    return sorted(h for ev in events if isinstance(ev, kind) and ev.medium == medium
                  for h in ev.block_hashes)


def block_files(root: Path, rank: int) -> list[Path]:
    """The tier's block files of `rank` (<root>/<run digest>/<rank>/<hh>/<key>.kvb)."""
    (run,) = [d for d in root.iterdir() if d.is_dir()]
    return sorted((run / str(rank)).glob("*/*.kvb"))


def test_file_tier_from_extra_config_cascades_asks_again_promotes_and_loads_byte_exact(
        tmp_path: Path):
    engine_id = f"pytest-{os.getpid()}-tier"
    extra = e.tier_extra_config(tmp_path, POOL_BLOCKS)
    with e.engine(engine_id, extra) as (sched, workers):
        keys_a = ints(e.prefix_hashes())
        blocks_a, stored = e.store_a(sched, workers)
        assert sched.planned.tier_jobs == []

        # Step 3: a's stored blocks cascade to every rank's files.
        e.engine_step(sched, workers, e.output())
        assert tier_jobs(sched) == [("cascade", keys_a)]
        events = sched.take_events()
        assert event_hashes(events, BlockStored, "CPU") == keys_a
        assert event_hashes(events, BlockStored, "STORAGE") == keys_a
        assert [len(block_files(tmp_path, r)) for r in range(e.TP)] == [4] * e.TP

        # Steps 4-6: c, another prefix, stores into the pool of four: a's blocks leave the pool
        # (they stay in the files), and c's blocks cascade too.
        keys_c = ints(hashes_of(4, 300))
        e.store_request(sched, workers, "c", hashes_of(4, 300), 2)
        e.engine_step(sched, workers, e.output())
        assert tier_jobs(sched) == [("cascade", keys_c)]
        events = sched.take_events()
        assert event_hashes(events, BlockRemoved, "CPU") == keys_a
        assert event_hashes(events, BlockStored, "STORAGE") == keys_c
        assert event_hashes(events, BlockRemoved, "STORAGE") == []

        # b shares a's prefix: the pool misses it; the tier checks a's files (step 7), then
        # promotes them into the pool (step 8); vLLM is asked to ask again meanwhile.
        b = v.Request("b", e.prefix_hashes() + [(200).to_bytes(8, "big")], 20, 0, None)
        assert sched.get_num_new_matched_tokens(b, 0) == (None, False)
        e.engine_step(sched, workers, e.output())
        assert tier_jobs(sched) == [("check", [k]) for k in keys_a]
        assert sched.get_num_new_matched_tokens(b, 0) == (None, False)
        e.engine_step(sched, workers, e.output())
        (promotion,) = sched.planned.tier_jobs
        assert (promotion.kind, promotion.keys) == ("promotion", keys_a)
        events = sched.take_events()
        assert event_hashes(events, BlockRemoved, "CPU") == keys_c
        assert event_hashes(events, BlockStored, "CPU") == keys_a

        # Step 9: a hit; b loads the promoted blocks, byte-exact on both ranks.
        e.load_b_checked(sched, workers, blocks_a, stored)
        assert sched.planned.tier_jobs == []
        stats = sched.scheduler.stats()
        assert (stats["loads_ok"], stats["stores_ok"]) == (1, 2)
        # vLLM main's reset_cache: refused with a tier (its files would outlive the reset).
        with pytest.raises(kvconnect.Error, match="reset_cache with a file tier is not supported"):
            sched.reset_cache()
        e.check_nothing_left(sched, workers)
    # The files stay: a's and c's blocks, on each rank.
    assert [len(block_files(tmp_path, r)) for r in range(e.TP)] == [8] * e.TP
