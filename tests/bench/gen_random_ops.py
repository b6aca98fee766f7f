#!/usr/bin/env python3
"""Seeded random op sequences in the `kvconnect replay` format, for the differential test of
the C++ manager against reference_manager.py: small key universes and capacities, so that
eviction, pinned blocks, failed stores, ghost hits, filter counting, resets and precondition
errors all happen often.

usage: gen_random_ops.py --seed S [--ops N] [--policy lru|arc] [--capacity C]
                         [--store-threshold T] [--max-tracker-size M]
"""
import argparse
import json
import random


def dump(obj):
    return json.dumps(obj, separators=(",", ":"))


def generate(seed, ops=3000, policy="lru", capacity=4, threshold=0, tracker=8):
    rng = random.Random(seed)
    universe = 3 * capacity + 4
    config = {"op": "config", "capacity": capacity, "policy": policy}
    if threshold:
        config.update(store_threshold=threshold, max_tracker_size=tracker)
    lines = [dump(config)]
    pending = []  # keys recently passed to prepare_store (likely in flight)
    loading = []  # keys recently passed to prepare_load (likely pinned)

    def keys(lo, hi):
        return [rng.randrange(universe) for _ in range(rng.randint(lo, hi))]

    def some(pool, lo, hi):
        if not pool or rng.random() < 0.15:
            return keys(lo, hi)
        return [rng.choice(pool) for _ in range(rng.randint(lo, hi))]

    for _ in range(ops):
        r = rng.random()
        if r < 0.20:
            lines.append(dump({"op": "lookup", "keys": keys(1, 4)}))
        elif r < 0.33:
            lines.append(dump({"op": "touch", "keys": keys(0, 6)}))
        elif r < 0.53:
            ks = keys(0, 5)
            if ks and rng.random() < 0.03:
                ks.append(ks[0])  # R1 quirk: a repeated key leaks a slot
            else:
                ks = list(dict.fromkeys(ks))
            pending = (pending + ks)[-16:]
            lines.append(dump({"op": "prepare_store", "keys": ks}))
        elif r < 0.68:
            ks = some(pending, 1, 4)
            lines.append(dump({"op": "complete_store", "keys": ks,
                               "success": rng.random() < 0.8}))
        elif r < 0.78:
            ks = some(pending, 1, 3)
            loading = (loading + ks)[-16:]
            lines.append(dump({"op": "prepare_load", "keys": ks}))
        elif r < 0.90:
            lines.append(dump({"op": "complete_load", "keys": some(loading, 1, 3)}))
        elif r < 0.99:
            lines.append(dump({"op": "take_events"}))
        elif r < 0.995:
            # The pool emptied with stores and loads in flight: their completions now meet
            # absent keys.
            lines.append(dump({"op": "reset"}))
        else:
            lines.append(dump(config))  # a fresh manager
            pending, loading = [], []
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--policy", choices=["lru", "arc"], default="lru")
    p.add_argument("--capacity", type=int, default=4)
    p.add_argument("--store-threshold", type=int, default=0)
    p.add_argument("--max-tracker-size", type=int, default=8)
    a = p.parse_args()
    for line in generate(a.seed, a.ops, a.policy, a.capacity, a.store_threshold,
                         a.max_tracker_size):
        print(line)


if __name__ == "__main__":
    main()
