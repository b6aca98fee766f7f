#!/usr/bin/env python3
"""Python reference of vLLM R1's CPU offloading manager, written from the reference spec
(shared/reference/vllm_offload.md §2-§4) the way vLLM's own code is structured: OrderedDict-based
LRU and ARC policies, CPUOffloadingManager, FilterReusedOffloadingManager; plus vLLM main's
reset_cache (017e9f44), op "reset".

It serves two purposes:
  replay [FILE|-]   the same JSON-lines protocol as `kvconnect replay` (outputs can be diffed);
  bench --trace F   the same benchmark loop as `kvconnect bench manager` (same JSON line), the
                    baseline the C++ manager is measured against.

lookup / prepare_load / prepare_store take vLLM's req_context argument and ignore it, as vLLM's
CPU manager does (reference_connector.py passes it).

Deviation from vLLM, mirrored by the C++ port: precondition violations of prepare_load /
complete_load raise ManagerError after undoing the partial work (vLLM asserts mid-way).
"""
import argparse
import json
import sys
import time
from collections import OrderedDict, deque

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
MAX_MANAGER_CAPACITY = 1 << 26
MAX_TRACKER_ENTRIES = 1 << 26


class ManagerError(Exception):
    """A failed kvc::status: code name + message."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


class BlockStatus:
    __slots__ = ("ref_cnt", "block_id")

    def __init__(self, block_id):
        self.ref_cnt = -1  # -1: store in flight, 0: ready and idle, n: n loads
        self.block_id = block_id

    @property
    def is_ready(self):
        return self.ref_cnt >= 0


class LRUCachePolicy:
    def __init__(self, cache_capacity):
        self.blocks = OrderedDict()

    def get(self, key):
        return self.blocks.get(key)

    def clear(self):
        self.blocks.clear()

    def insert(self, key, block):
        self.blocks[key] = block

    def remove(self, key):
        del self.blocks[key]

    def touch(self, keys):
        for key in reversed(keys):
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def evict(self, n, protected):
        if n == 0:
            return []
        candidates = []
        for key, block in self.blocks.items():
            if block.ref_cnt == 0 and key not in protected:
                candidates.append((key, block))
                if len(candidates) == n:
                    break
        if len(candidates) < n:
            return None
        for key, _ in candidates:
            del self.blocks[key]
        return candidates


class ARCCachePolicy:
    def __init__(self, cache_capacity):
        self.cache_capacity = cache_capacity
        self.target_t1_size = 0.0
        self.t1 = OrderedDict()
        self.t2 = OrderedDict()
        self.b1 = OrderedDict()
        self.b2 = OrderedDict()

    def clear(self):
        self.t1.clear()
        self.t2.clear()
        self.b1.clear()
        self.b2.clear()
        self.target_t1_size = 0.0

    def get(self, key):
        block = self.t1.get(key)
        return block if block is not None else self.t2.get(key)

    def insert(self, key, block):
        self.t1[key] = block
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def remove(self, key):
        if self.t1.pop(key, None) is None:
            self.t2.pop(key, None)

    def touch(self, keys):
        for key in reversed(keys):
            if key in self.t1:
                block = self.t1.pop(key)
                if not block.is_ready:
                    self.t1[key] = block  # just prepared for store: not seen twice
                else:
                    self.t2[key] = block
            elif key in self.t2:
                self.t2.move_to_end(key)
            elif key in self.b1:
                delta = max(1, len(self.b2) / len(self.b1))
                self.target_t1_size = min(self.target_t1_size + delta, self.cache_capacity)
                self.b1.move_to_end(key)
            elif key in self.b2:
                delta = max(1, len(self.b1) / len(self.b2))
                self.target_t1_size = max(self.target_t1_size - delta, 0)
                self.b2.move_to_end(key)

    def evict(self, n, protected):
        if n == 0:
            return []
        candidates = []
        selected = set()
        t1_size = len(self.t1)
        for _ in range(n):
            candidate = None
            if t1_size >= int(self.target_t1_size):
                for key, block in self.t1.items():
                    if block.ref_cnt == 0 and key not in protected and key not in selected:
                        candidate = (key, block, True)
                        t1_size -= 1
                        break
            if candidate is None:
                for key, block in self.t2.items():
                    if block.ref_cnt == 0 and key not in protected and key not in selected:
                        candidate = (key, block, False)
                        break
                if candidate is None:
                    return None
            candidates.append(candidate)
            selected.add(candidate[0])
        for key, block, from_t1 in candidates:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
        for ghost in (self.b1, self.b2):
            while len(ghost) > self.cache_capacity:
                ghost.popitem(last=False)
        return [(key, block) for key, block, _ in candidates]


class PrepareStoreOutput:
    __slots__ = ("keys_to_store", "block_ids", "evicted_keys")

    def __init__(self, keys_to_store, block_ids, evicted_keys):
        self.keys_to_store = keys_to_store
        self.block_ids = block_ids
        self.evicted_keys = evicted_keys


class OffloadingEvent:
    __slots__ = ("keys", "removed")

    def __init__(self, keys, removed):
        self.keys = keys
        self.removed = removed


class CPUOffloadingManager:
    def __init__(self, num_blocks, cache_policy="lru", enable_events=True):
        self._num_blocks = num_blocks
        self._num_allocated_blocks = 0
        self._free_list = []
        self.events = [] if enable_events else None
        policy_cls = {"lru": LRUCachePolicy, "arc": ARCCachePolicy}[cache_policy]
        self._policy = policy_cls(cache_capacity=num_blocks)

    def _get_num_free_blocks(self):
        return len(self._free_list) + self._num_blocks - self._num_allocated_blocks

    def _allocate_blocks(self, keys):
        num_fresh = min(len(keys), self._num_blocks - self._num_allocated_blocks)
        num_reused = len(keys) - num_fresh
        assert len(self._free_list) >= num_reused
        blocks = []
        for _ in range(num_fresh):
            blocks.append(BlockStatus(self._num_allocated_blocks))
            self._num_allocated_blocks += 1
        for _ in range(num_reused):
            blocks.append(BlockStatus(self._free_list.pop()))
        return blocks

    def _free_block(self, block):
        self._free_list.append(block.block_id)

    def lookup(self, key, req_context=None):
        block = self._policy.get(key)
        return block is not None and block.is_ready

    def prepare_load(self, keys, req_context=None):
        blocks = []
        for key in keys:
            block = self._policy.get(key)
            error = None
            if block is None:
                error = ManagerError("not_found", f"prepare_load: key {key} is not stored")
            elif not block.is_ready:
                error = ManagerError(
                    "not_ready", f"prepare_load: key {key} is not ready (store in flight)")
            if error is not None:
                for done in blocks:
                    done.ref_cnt -= 1
                raise error
            block.ref_cnt += 1
            blocks.append(block)
        return [block.block_id for block in blocks]

    def complete_load(self, keys):
        blocks = []
        for key in keys:
            block = self._policy.get(key)
            error = None
            if block is None:
                error = ManagerError("not_found", f"complete_load: key {key} is not stored")
            elif block.ref_cnt <= 0:
                error = ManagerError(
                    "precondition_failed", f"complete_load: key {key} has no load in flight")
            if error is not None:
                for done in blocks:
                    done.ref_cnt += 1
                raise error
            block.ref_cnt -= 1
            blocks.append(block)

    def touch(self, keys):
        self._policy.touch(keys)

    def prepare_store(self, keys, req_context=None):
        keys_to_store = [key for key in keys if self._policy.get(key) is None]
        if not keys_to_store:
            return PrepareStoreOutput([], [], [])
        num_blocks_to_evict = len(keys_to_store) - self._get_num_free_blocks()
        to_evict = []
        if num_blocks_to_evict > 0:
            evicted = self._policy.evict(num_blocks_to_evict, set(keys))
            if evicted is None:
                return None
            for key, block in evicted:
                self._free_block(block)
                to_evict.append(key)
        if to_evict and self.events is not None:
            self.events.append(OffloadingEvent(to_evict, removed=True))
        blocks = self._allocate_blocks(keys_to_store)
        for key, block in zip(keys_to_store, blocks):
            self._policy.insert(key, block)
        return PrepareStoreOutput(keys_to_store, [b.block_id for b in blocks], to_evict)

    def complete_store(self, keys, success=True):
        stored_keys = []
        if success:
            for key in keys:
                block = self._policy.get(key)
                if block is not None and not block.is_ready:
                    block.ref_cnt = 0
                    stored_keys.append(key)
        else:
            for key in keys:
                block = self._policy.get(key)
                if block is not None and not block.is_ready:
                    self._policy.remove(key)
                    self._free_block(block)
        if stored_keys and self.events is not None:
            self.events.append(OffloadingEvent(stored_keys, removed=False))

    def reset_cache(self):
        # vLLM main (017e9f44): every block goes, the pool starts over; no event.
        self._policy.clear()
        self._free_list.clear()
        self._num_allocated_blocks = 0

    def take_events(self):
        if self.events is None:
            return
        yield from self.events
        self.events.clear()


class FilterReusedOffloadingManager:
    def __init__(self, backing, store_threshold=2, max_tracker_size=64_000):
        if store_threshold < 2:
            raise ValueError("store_threshold must be >= 2")
        if max_tracker_size < 1:
            raise ValueError("max_tracker_size must be >= 1")
        self._backing = backing
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        self.counts = OrderedDict()

    def lookup(self, key, req_context=None):
        if key in self.counts:
            self.counts.move_to_end(key)
            self.counts[key] += 1
        else:
            if len(self.counts) >= self.max_tracker_size:
                self.counts.popitem(last=False)
            self.counts[key] = 1
        return self._backing.lookup(key)

    def prepare_store(self, keys, req_context=None):
        eligible = [k for k in keys if self.counts.get(k, 0) >= self.store_threshold]
        return self._backing.prepare_store(eligible)

    def prepare_load(self, keys, req_context=None):
        return self._backing.prepare_load(keys)

    def complete_load(self, keys):
        return self._backing.complete_load(keys)

    def touch(self, keys):
        return self._backing.touch(keys)

    def complete_store(self, keys, success=True):
        return self._backing.complete_store(keys, success)

    def take_events(self):
        return self._backing.take_events()

    def reset_cache(self):
        # vLLM main merged this filter into its manager, whose reset_cache keeps the counts.
        self._backing.reset_cache()


def validate(capacity, policy, threshold, tracker):
    """Mirror of kvc::scheduler::validate + parse_eviction_policy (same messages)."""
    if policy not in ("lru", "arc"):
        raise ManagerError("unknown_policy",
                           f'unknown eviction policy "{policy}" (expected lru or arc)')
    if capacity < 1:
        raise ManagerError("invalid_argument", "capacity must be >= 1")
    if capacity > MAX_MANAGER_CAPACITY:
        raise ManagerError("invalid_argument", f"capacity must be <= {MAX_MANAGER_CAPACITY}")
    if threshold == 1:
        raise ManagerError("invalid_argument",
                           "store_threshold must be 0 (reuse filter off) or >= 2, got 1")
    if threshold >= 2:
        if tracker < 1:
            raise ManagerError("invalid_argument",
                               "max_tracker_size must be >= 1 when the reuse filter is on")
        if tracker > MAX_TRACKER_ENTRIES:
            raise ManagerError("invalid_argument",
                               f"max_tracker_size must be <= {MAX_TRACKER_ENTRIES}")


def make_manager(capacity, policy, threshold=0, tracker=64000):
    validate(capacity, policy, threshold, tracker)
    manager = CPUOffloadingManager(capacity, policy, enable_events=True)
    if threshold >= 2:
        manager = FilterReusedOffloadingManager(manager, threshold, tracker)
    return manager


# --- replay ---------------------------------------------------------------------------------

OPS = {
    "config": ({"capacity", "policy"}, {"store_threshold", "max_tracker_size"}),
    "lookup": ({"keys"}, set()),
    "touch": ({"keys"}, set()),
    "prepare_load": ({"keys"}, set()),
    "complete_load": ({"keys"}, set()),
    "prepare_store": ({"keys"}, set()),
    "complete_store": ({"keys", "success"}, set()),
    "take_events": (set(), set()),
    "reset": (set(), set()),
}


def is_uint(v, limit=U64_MAX):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= limit


def bad(message):
    return ManagerError("invalid_argument", message)


def field_keys(op, obj):
    keys = obj["keys"]
    if not isinstance(keys, list) or not all(is_uint(k) for k in keys):
        raise bad(f'op "{op}": "keys" must be an array of non-negative integers')
    return keys


def field_uint(op, obj, name, default):
    if name not in obj:
        return default
    v = obj[name]
    if not is_uint(v):
        raise bad(f'op "{op}": "{name}" must be a non-negative integer')
    return min(v, U32_MAX)


def replay_line(state, line):
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise bad(f"invalid JSON: {e}")
    if not isinstance(obj, dict):
        raise bad("a line must be a JSON object")
    op = obj.get("op")
    if not isinstance(op, str):
        raise bad('missing string field "op"')
    if op not in OPS:
        raise bad(f'unknown op "{op}"')
    if op != "config" and state.get("m") is None:
        raise ManagerError("precondition_failed", 'no manager yet: the first op must be "config"')
    required, optional = OPS[op]
    for name in sorted(obj):
        if name != "op" and name not in required and name not in optional:
            raise bad(f'op "{op}": unknown field "{name}"')
    for name in sorted(required):
        if name not in obj:
            raise bad(f'op "{op}": missing field "{name}"')

    if op == "config":
        capacity = field_uint(op, obj, "capacity", 0)
        policy = obj["policy"]
        if not isinstance(policy, str):
            raise bad(f'op "{op}": "policy" must be a string')
        threshold = field_uint(op, obj, "store_threshold", 0)
        tracker = field_uint(op, obj, "max_tracker_size", 64000)
        state["m"] = make_manager(capacity, policy, threshold, tracker)
        return {"ok": True}

    m = state["m"]
    if op == "reset":
        m.reset_cache()
        return {"ok": True}
    if op == "take_events":
        return {"events": [{"kind": "removed" if e.removed else "stored", "keys": list(e.keys)}
                           for e in m.take_events()]}
    keys = field_keys(op, obj)
    if op == "lookup":
        return {"hits": [m.lookup(k) for k in keys]}
    if op == "touch":
        m.touch(keys)
        return {"ok": True}
    if op == "prepare_load":
        return {"block_ids": m.prepare_load(keys)}
    if op == "complete_load":
        m.complete_load(keys)
        return {"ok": True}
    if op == "prepare_store":
        out = m.prepare_store(keys)
        if out is None:
            return {"result": None}
        return {"stored": list(out.keys_to_store), "block_ids": list(out.block_ids),
                "evicted": list(out.evicted_keys)}
    success = obj["success"]
    if not isinstance(success, bool):
        raise bad(f'op "{op}": "success" must be a boolean')
    m.complete_store(keys, success)
    return {"ok": True}


def replay(stream, out):
    state = {}
    failed = False
    for line in stream:
        if not line.strip():
            continue
        try:
            answer = replay_line(state, line)
        except ManagerError as e:
            answer = {"error": str(e)}
            failed = True
        out.write(json.dumps(answer, separators=(",", ":"), ensure_ascii=False) + "\n")
    return 1 if failed else 0


# --- bench ----------------------------------------------------------------------------------

def bench(trace, policy, threshold, capacity, window):
    with open(trace) as f:
        requests = [[int(x) for x in line.split()] for line in f if line.strip()]
    m = make_manager(capacity, policy, threshold)
    fifo = deque()
    key_ops = hit_blocks = stored = evicted = store_fail = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    for i, keys in enumerate(requests):
        m.touch(keys)
        key_ops += len(keys)
        hits = 0
        for key in keys:
            key_ops += 1
            if not m.lookup(key):
                break
            hits += 1
        hit_blocks += hits
        if hits:
            loaded = keys[:hits]
            m.prepare_load(loaded)
            key_ops += hits
            fifo.append((False, loaded))
        rest = keys[hits:]
        out = m.prepare_store(rest)
        key_ops += len(rest)
        if out is None:
            store_fail += 1
        elif out.keys_to_store:
            stored += len(out.keys_to_store)
            evicted += len(out.evicted_keys)
            m.touch(keys)
            key_ops += len(keys)
            fifo.append((True, list(out.keys_to_store)))
        while len(fifo) > window:
            is_store, done = fifo.popleft()
            if is_store:
                m.complete_store(done, True)
            else:
                m.complete_load(done)
            key_ops += len(done)
        if (i + 1) % 1024 == 0:
            for _ in m.take_events():
                pass
    seconds = time.perf_counter() - start
    print(json.dumps({"cpu_seconds": time.process_time() - cpu_start}), file=sys.stderr)
    return {"policy": policy, "store_threshold": threshold, "requests": len(requests),
            "key_ops": key_ops, "seconds": seconds, "key_ops_per_s": key_ops / seconds,
            "hit_blocks": hit_blocks, "stored": stored, "evicted": evicted,
            "store_fail": store_fail}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay", help="answer a JSON-lines op file like `kvconnect replay`")
    rp.add_argument("file", nargs="?", default="-")
    bp = sub.add_parser("bench", help="the `kvconnect bench manager` loop, in Python")
    bp.add_argument("--trace", required=True)
    bp.add_argument("--policy", choices=["lru", "arc"], default="lru")
    bp.add_argument("--store-threshold", type=int, default=0)
    bp.add_argument("--capacity", type=int, default=65536)
    bp.add_argument("--window", type=int, default=8)
    args = parser.parse_args()
    if args.cmd == "replay":
        if args.file == "-":
            return replay(sys.stdin, sys.stdout)
        with open(args.file) as f:
            return replay(f, sys.stdout)
    try:
        result = bench(args.trace, args.policy, args.store_threshold, args.capacity, args.window)
    except ManagerError as e:
        print(f"reference_manager: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
