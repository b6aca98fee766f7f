"""Python reference of vLLM R1's (a269744e9f) OffloadingConnector, scheduler role: the
OffloadingConnectorScheduler over reference_manager's CPU offloading manager, written the way
vLLM's code is structured, so that it costs per step what vLLM's own connector costs: dicts keyed
by request id, one RequestOffloadState (with per-group RequestGroupState) per request, the
SchedulerOutput walked with yield_req_data, offload keys made with make_offload_key (block hash
bytes + 4-byte group index), block-id lists sliced per step, per-key manager.lookup, touch /
prepare_load / prepare_store on key lists, and the metadata's reqs_to_load / reqs_to_store
dicts of (src, dst) TransferSpecs whose GPU/CPU LoadStoreSpecs hold numpy int64 arrays.
update_connector_output completes stores and loads from KVConnectorOutput.finished_sending /
finished_recving; request_finished drops the request's state; take_events turns the manager's
events into BlockStored / BlockRemoved dicts (the connector traces' JSON form).

It is the baseline tests/bench/python_scheduler_bench.py measures kvconnect's vLLM connector
against (path "r1"), and tests/python/test_reference_connector.py replays vLLM's recorded
connector traces through it (every answer equal to vLLM's).

Left out: logging, metrics, the worker role. The KV-cache groups are all looked up as full
attention (as R1 does); the per-group loops are kept, over as many groups as the spec names (the
bench and the traces have one). The CPU LoadStoreSpecs are built here from the block ids
reference_manager returns (vLLM's manager builds the same object inside prepare_load /
prepare_store).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, NamedTuple

import numpy as np

import reference_manager

ReqId = str


# --- vllm/v1/kv_offload/abstract.py, mediums.py -------------------------------------------------

def make_offload_key(block_hash: bytes, group_idx: int) -> bytes:
    """An offloaded block's key: the block hash, then the KV-cache group index (4 bytes)."""
    return block_hash + group_idx.to_bytes(4, "big", signed=False)


def get_offload_block_hash(key: bytes) -> bytes:
    return key[:-4]


@dataclass
class ReqContext:
    kv_transfer_params: dict[str, Any] | None = None


class BlockIDsLoadStoreSpec:
    def __init__(self, block_ids: list[int]):
        self.block_ids = np.array(block_ids, dtype=np.int64)


class GPULoadStoreSpec(BlockIDsLoadStoreSpec):
    def __init__(self, block_ids: list[int], group_sizes: Sequence[int],
                 block_indices: Sequence[int]):
        super().__init__(block_ids)
        assert sum(group_sizes) == len(block_ids)
        assert len(block_indices) == len(group_sizes)
        self.group_sizes = group_sizes
        self.block_indices = block_indices

    @staticmethod
    def medium() -> str:
        return "GPU"


class CPULoadStoreSpec(BlockIDsLoadStoreSpec):
    @staticmethod
    def medium() -> str:
        return "CPU"


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


# --- the spec (vllm/v1/kv_offload/spec.py, cpu/spec.py): only what the scheduler side reads ----

@dataclass
class OffloadingSpec:
    """gpu_block_size: one per KV-cache group; block_size_factor: offloaded block / GPU block;
    hash_block_size: the granularity of Request.block_hashes; the manager's settings."""
    gpu_block_size: tuple[int, ...]
    block_size_factor: int
    hash_block_size: int
    num_cpu_blocks: int
    enable_prefix_caching: bool = True
    eviction_policy: str = "lru"
    store_threshold: int = 0
    max_tracker_size: int = 64_000
    enable_events: bool = True

    def get_manager(self):
        manager = reference_manager.CPUOffloadingManager(
            self.num_cpu_blocks, self.eviction_policy, enable_events=self.enable_events)
        if self.store_threshold >= 2:
            manager = reference_manager.FilterReusedOffloadingManager(
                manager, self.store_threshold, self.max_tracker_size)
        return manager


# --- vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py ------------------------

class GroupOffloadConfig(NamedTuple):
    group_idx: int
    gpu_block_size: int
    offloaded_block_size: int
    hash_block_size_factor: int


class SchedulerOffloadConfig(NamedTuple):
    kv_group_configs: tuple[GroupOffloadConfig, ...]
    block_size_factor: int

    @classmethod
    def from_spec(cls, spec: OffloadingSpec) -> SchedulerOffloadConfig:
        groups = []
        for idx, gpu_block_size in enumerate(spec.gpu_block_size):
            offloaded = gpu_block_size * spec.block_size_factor
            groups.append(GroupOffloadConfig(idx, gpu_block_size, offloaded,
                                             offloaded // spec.hash_block_size))
        return cls(tuple(groups), spec.block_size_factor)


@dataclass
class RequestGroupState:
    offload_keys: list[bytes] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)
    next_stored_block_idx: int = 0  # the next offloaded block to store


@dataclass(slots=True)
class RequestOffloadState:
    config: SchedulerOffloadConfig
    req: Any  # vLLM's Request
    group_states: tuple[RequestGroupState, ...] = field(init=False)
    req_context: ReqContext = field(init=False)
    num_locally_computed_tokens: int = 0  # hits in the GPU prefix cache

    def __post_init__(self) -> None:
        self.group_states = tuple(RequestGroupState() for _ in self.config.kv_group_configs)
        self.req_context = ReqContext(kv_transfer_params=self.req.kv_transfer_params)

    def update_offload_keys(self) -> None:
        """Keys for the request's new full offloaded blocks: the last hash of each."""
        for group_config, group_state in zip(self.config.kv_group_configs, self.group_states):
            factor = group_config.hash_block_size_factor
            start = factor * len(group_state.offload_keys) + factor - 1
            for block_hash in islice(self.req.block_hashes, start, None, factor):
                group_state.offload_keys.append(
                    make_offload_key(block_hash, group_config.group_idx))

    def update_block_id_groups(self, new_block_id_groups) -> None:
        if new_block_id_groups is None:
            return
        assert len(new_block_id_groups) == len(self.group_states)
        for group_state, new_blocks in zip(self.group_states, new_block_id_groups):
            group_state.block_ids.extend(new_blocks)

    def advance_stored_idx(self, num_offloadable_tokens: int) -> None:
        for group_config, group_state in zip(self.config.kv_group_configs, self.group_states):
            group_state.next_stored_block_idx = (
                num_offloadable_tokens // group_config.offloaded_block_size)


@dataclass
class OffloadingConnectorMetadata:
    reqs_to_load: dict[ReqId, tuple]   # request id -> (CPU src spec, GPU dst spec)
    reqs_to_store: dict[ReqId, tuple]  # request id -> (GPU src spec, CPU dst spec)
    reqs_to_flush: Any = None


def yield_req_data(scheduler_output):
    """(req_id, new_block_id_groups, preempted) of the new, then the cached requests."""
    for req_data in scheduler_output.scheduled_new_reqs:
        yield req_data.req_id, req_data.block_ids, False
    cached_reqs = scheduler_output.scheduled_cached_reqs
    yield from zip(cached_reqs.req_ids, cached_reqs.new_block_ids,
                   (req_id in cached_reqs.resumed_req_ids for req_id in cached_reqs.req_ids))


class OffloadingConnectorScheduler:
    def __init__(self, spec: OffloadingSpec):
        self.config = SchedulerOffloadConfig.from_spec(spec)
        self.manager = spec.get_manager()
        self.lookup_groups = list(range(len(spec.gpu_block_size)))  # all full attention
        self._req_status: dict[ReqId, RequestOffloadState] = {}
        self._reqs_to_load: dict[ReqId, tuple] = {}
        # with the GPU prefix cache on: the keys being loaded (a hit on one delays the request)
        self._blocks_being_loaded: set[bytes] | None = (
            set() if spec.enable_prefix_caching else None)
        self._reqs_being_stored = defaultdict(set)
        self._reqs_being_loaded = defaultdict(set)

    def _maximal_prefix_lookup(self, keys: Iterable[bytes], req_context: ReqContext):
        hit_count = 0
        defer_lookup = False
        for key in keys:
            result = self.manager.lookup(key, req_context)
            if result is None:
                defer_lookup = True
                result = True
            if not result:
                break
            hit_count += 1
        return hit_count if not defer_lookup else None

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        if req_status := self._req_status.get(request.request_id):
            for group_state in req_status.group_states:
                group_state.block_ids.clear()
        else:
            req_status = RequestOffloadState(config=self.config, req=request)
            self._req_status[request.request_id] = req_status

        req_status.update_offload_keys()
        req_status.num_locally_computed_tokens = num_computed_tokens
        for gs in req_status.group_states:
            self.manager.touch(gs.offload_keys)

        max_hit_size_tokens = req_status.req.num_tokens
        num_hit_tokens = 0
        defer_lookup = False
        delay_request = False
        for group_idx in self.lookup_groups:
            group_config = self.config.kv_group_configs[group_idx]
            offloaded_block_size = group_config.offloaded_block_size
            offload_keys = req_status.group_states[group_idx].offload_keys

            num_blocks = max_hit_size_tokens // offloaded_block_size
            assert len(offload_keys) >= num_blocks
            max_hit_size_tokens = num_blocks * offloaded_block_size
            num_hit_tokens = max_hit_size_tokens - num_computed_tokens
            if num_hit_tokens < offloaded_block_size:
                return 0, False

            start_block_idx = num_computed_tokens // offloaded_block_size
            offload_keys = offload_keys[start_block_idx:num_blocks]
            block_hits = self._maximal_prefix_lookup(offload_keys, req_status.req_context)
            if block_hits == 0:
                return 0, False
            if block_hits is None:
                defer_lookup = True
            else:
                max_hit_size_tokens = offloaded_block_size * (start_block_idx + block_hits)

            num_hit_tokens = max_hit_size_tokens - num_computed_tokens
            if num_hit_tokens < offloaded_block_size:
                return 0, False

            if (block_hits and self._blocks_being_loaded
                    and any(key in self._blocks_being_loaded
                            for key in offload_keys[:block_hits])):
                delay_request = True

        if defer_lookup or delay_request:
            return None, False
        return num_hit_tokens, True

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        if num_external_tokens == 0:
            return
        req_status = self._req_status[request.request_id]
        num_locally_computed_tokens = req_status.num_locally_computed_tokens
        num_cached_tokens = num_locally_computed_tokens + num_external_tokens
        params = req_status.req_context.kv_transfer_params
        do_remote_decode = params is not None and params.get("do_remote_decode")

        keys_to_load: list[bytes] = []
        dst_block_ids: list[int] = []
        group_sizes: list[int] = []
        block_indices: list[int] = []
        for group_config, group_state, group_blocks in zip(
                self.config.kv_group_configs, req_status.group_states, blocks.blocks):
            gpu_block_size = group_config.gpu_block_size
            offload_keys = group_state.offload_keys
            num_gpu_blocks = cdiv(num_cached_tokens, gpu_block_size)
            assert len(group_blocks) >= num_gpu_blocks
            num_locally_computed_gpu_blocks = num_gpu_blocks
            for i, block in enumerate(group_blocks[:num_gpu_blocks]):
                if not block.is_null and block.block_hash is None:
                    num_locally_computed_gpu_blocks = i
                    break
            assert num_locally_computed_tokens <= num_locally_computed_gpu_blocks * gpu_block_size
            num_pending_gpu_blocks = num_gpu_blocks - num_locally_computed_gpu_blocks

            num_blocks = cdiv(num_cached_tokens, group_config.offloaded_block_size)
            assert len(offload_keys) >= num_blocks
            if num_pending_gpu_blocks:
                start_block_idx = num_locally_computed_gpu_blocks // self.config.block_size_factor
                keys_to_load.extend(offload_keys[start_block_idx:num_blocks])
            dst_block_ids.extend(
                block.block_id
                for block in group_blocks[num_locally_computed_gpu_blocks:num_gpu_blocks])
            group_sizes.append(num_pending_gpu_blocks)
            block_indices.append(num_locally_computed_gpu_blocks)
            if not do_remote_decode:
                group_state.next_stored_block_idx = num_blocks

        src_spec = CPULoadStoreSpec(
            self.manager.prepare_load(keys_to_load, req_status.req_context))
        dst_spec = GPULoadStoreSpec(dst_block_ids, group_sizes=group_sizes,
                                    block_indices=block_indices)
        self._reqs_to_load[request.request_id] = (src_spec, dst_spec)
        req_blocks_being_loaded = self._reqs_being_loaded[request.request_id]
        req_blocks_being_loaded.update(keys_to_load)
        if self._blocks_being_loaded is not None:
            self._blocks_being_loaded.update(req_blocks_being_loaded)

    def _get_reqs_to_store(self, scheduler_output) -> dict[ReqId, tuple]:
        block_size_factor = self.config.block_size_factor
        reqs_to_store: dict[ReqId, tuple] = {}
        for req_id, new_block_id_groups, preempted in yield_req_data(scheduler_output):
            req_status = self._req_status[req_id]
            req_status.update_offload_keys()
            req = req_status.req
            if preempted:
                for group_state in req_status.group_states:
                    group_state.block_ids.clear()
            if new_block_id_groups:
                req_status.update_block_id_groups(new_block_id_groups)

            num_scheduled_tokens = scheduler_output.num_scheduled_tokens[req_id]
            num_tokens_after_batch = req.num_computed_tokens + num_scheduled_tokens
            num_offloadable_tokens = min(num_tokens_after_batch, req.num_tokens)

            # the blocks to offload, less those a skipped (null, id 0) GPU block ends
            new_offload_keys: list[bytes] = []
            for group_config, group_state in zip(self.config.kv_group_configs,
                                                 req_status.group_states):
                num_blocks = num_offloadable_tokens // group_config.offloaded_block_size
                start_block_idx = group_state.next_stored_block_idx
                if num_blocks <= start_block_idx:
                    continue
                offload_keys = group_state.offload_keys[start_block_idx:num_blocks]
                offload_block_ids = group_state.block_ids[
                    start_block_idx * block_size_factor + block_size_factor - 1:
                    num_blocks * block_size_factor:block_size_factor]
                assert len(offload_keys) == len(offload_block_ids)
                for offload_key, block_id in zip(offload_keys, offload_block_ids):
                    if block_id != 0:
                        new_offload_keys.append(offload_key)

            if not new_offload_keys:
                req_status.advance_stored_idx(num_offloadable_tokens)
                continue
            store_output = self.manager.prepare_store(new_offload_keys, req_status.req_context)
            if store_output is None:
                continue  # cannot store (vLLM logs a warning)
            if not store_output.keys_to_store:
                req_status.advance_stored_idx(num_offloadable_tokens)
                continue
            for group_state in req_status.group_states:
                self.manager.touch(group_state.offload_keys)

            keys_to_store = set(store_output.keys_to_store)
            group_sizes: list[int] = []
            block_indices: list[int] = []
            src_block_ids: list[int] = []
            for group_config, group_state in zip(self.config.kv_group_configs,
                                                 req_status.group_states):
                num_blocks = num_offloadable_tokens // group_config.offloaded_block_size
                start_block_idx = group_state.next_stored_block_idx
                block_ids = group_state.block_ids
                num_group_blocks = 0
                start_gpu_block_idx = None
                for idx, offload_key in enumerate(
                        group_state.offload_keys[start_block_idx:num_blocks]):
                    if offload_key not in keys_to_store:
                        continue
                    gpu_block_idx = (start_block_idx + idx) * block_size_factor
                    num_group_blocks += block_size_factor
                    for i in range(block_size_factor):
                        block_id = block_ids[gpu_block_idx + i]
                        if block_id == 0:
                            assert start_gpu_block_idx is None  # skipped blocks come first
                            continue
                        elif start_gpu_block_idx is None:
                            start_gpu_block_idx = gpu_block_idx + i
                        src_block_ids.append(block_id)
                group_sizes.append(num_group_blocks)
                block_indices.append(start_gpu_block_idx or 0)
                group_state.next_stored_block_idx = num_blocks

            src_spec = GPULoadStoreSpec(src_block_ids, group_sizes=group_sizes,
                                        block_indices=block_indices)
            dst_spec = CPULoadStoreSpec(store_output.block_ids)
            reqs_to_store[req_id] = (src_spec, dst_spec)
            self._reqs_being_stored[req_id] |= keys_to_store
        return reqs_to_store

    def build_connector_meta(self, scheduler_output) -> OffloadingConnectorMetadata:
        meta = OffloadingConnectorMetadata(
            reqs_to_load=self._reqs_to_load,
            reqs_to_store=self._get_reqs_to_store(scheduler_output),
            reqs_to_flush=scheduler_output.preempted_req_ids)
        self._reqs_to_load = {}
        # a preempted request's stores complete now (its flush runs before the next step)
        for req_id in scheduler_output.preempted_req_ids or ():
            keys = self._reqs_being_stored.get(req_id)
            if keys:
                self.manager.complete_store(keys)
                keys.clear()
        return meta

    def update_connector_output(self, connector_output) -> None:
        for req_id in connector_output.finished_sending or []:
            keys = self._reqs_being_stored.pop(req_id, None)
            if keys:
                self.manager.complete_store(keys)
        for req_id in connector_output.finished_recving or []:
            keys = self._reqs_being_loaded.pop(req_id, None)
            if keys:
                if self._blocks_being_loaded:
                    self._blocks_being_loaded.difference_update(keys)
                self.manager.complete_load(keys)

    def request_finished(self, request, block_ids: list[int]):
        req_id = request.request_id
        self._req_status.pop(req_id, None)
        return req_id in self._reqs_being_stored, None

    def take_events(self):
        """The manager's events as the connector traces' BlockStored / BlockRemoved dicts."""
        for event in self.manager.take_events():
            block_hashes = [get_offload_block_hash(key) for key in event.keys]
            if event.removed:
                yield {"type": "BlockRemoved", "block_hashes": block_hashes, "medium": "CPU",
                       "group_idx": None}
            else:
                yield {"type": "BlockStored", "block_hashes": block_hashes,
                       "parent_block_hash": None, "token_ids": [], "block_size": 0,
                       "lora_id": None, "medium": "CPU", "lora_name": None,
                       "extra_keys": None, "group_idx": None}


class OffloadingConnector:
    """vLLM's OffloadingConnector in the scheduler role: each call checks the role and goes to
    the OffloadingConnectorScheduler (the frame vLLM's engine calls through)."""

    def __init__(self, spec: OffloadingSpec, scheduler_class: type | None = None):
        """scheduler_class: the scheduler to build over `spec` (vLLM's own for
        vllm_r1_source.py); OffloadingConnectorScheduler above when None."""
        self.connector_scheduler: OffloadingConnectorScheduler | None = (
            (scheduler_class or OffloadingConnectorScheduler)(spec))

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        assert self.connector_scheduler is not None
        return self.connector_scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        assert self.connector_scheduler is not None
        return self.connector_scheduler.update_state_after_alloc(request, blocks,
                                                                 num_external_tokens)

    def build_connector_meta(self, scheduler_output) -> OffloadingConnectorMetadata:
        assert self.connector_scheduler is not None
        return self.connector_scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output) -> None:
        assert self.connector_scheduler is not None
        self.connector_scheduler.update_connector_output(connector_output)

    def request_finished(self, request, block_ids: list[int]):
        assert self.connector_scheduler is not None
        return self.connector_scheduler.request_finished(request, block_ids)

    def take_events(self):
        assert self.connector_scheduler is not None
        return self.connector_scheduler.take_events()
