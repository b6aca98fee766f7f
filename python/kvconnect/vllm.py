"""kvconnect as a vLLM KV connector (docs/python.md).

Load it with::

    --kv-transfer-config '{"kv_connector": "KvconnectConnector",
                           "kv_connector_module_path": "kvconnect.vllm",
                           "kv_role": "kv_both",
                           "kv_connector_extra_config": {"cpu_bytes_to_use": 8589934592}}'

vLLM constructs ``KvconnectConnector(vllm_config, role, kv_cache_config)``. This module only
adapts vLLM's objects to kvconnect's C++ API (``kvconnect.SchedulerConnector``): it reads the
fields vLLM's own OffloadingConnectorScheduler reads and makes no decision of its own. The
scheduler role imports neither torch nor CUDA.

The extra config: vLLM's OffloadingConnector keys (``cpu_bytes_to_use``, ``block_size``,
``eviction_policy``, ``store_threshold``, ``max_tracker_size``; any key that is not a section
name) are the ``offload`` section of kvconnect's config (docs/config.md); kvconnect's sections
(``runtime``, ``observe``, ...) go by their names. vLLM's own facts (TP/PP sizes, block sizes,
the KV cache's bytes per block, prefix caching) override the config. The same loader as a YAML
file reads it all: a key it refuses is a ``kvconnect.ConfigError`` (a ``ValueError``) naming it.

vLLM's process model: vLLM builds its workers (and registers their KV caches) before its
scheduler. Whichever side comes first creates the node's segment, named from the engine id and
the data-parallel rank; the other attaches it. The scheduler side publishes the port it listens
on in the segment; each worker joins it from a thread of kvconnect's as soon as it is there, so
neither constructor nor register_kv_caches waits for the scheduler. The scheduler role's first
build_connector_meta waits (up to runtime.ready_timeout_ms) for every rank to join; a worker
whose scheduler side never comes raises kvconnect.Timeout from its first
bind_connector_metadata, after runtime.ready_timeout_ms.

The worker role hands vLLM its finished transfers (get_kv_connector_stats) for vLLM's own log
line and Prometheus series, as vLLM's OffloadingConnector does (kvconnect.vllm_stats).

reset_cache follows vLLM main (vLLM R1's OffloadingConnector has none): it empties the CPU tier
and answers True (docs/python.md). Not yet: more than one KV-cache group.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import kvconnect
from kvconnect.vllm_config import load_config, worker_rank
from kvconnect.vllm_stats import KvconnectConnectorStats, KvconnectPromMetrics

try:  # vLLM's own types when vLLM is importable; stand-ins with the same fields otherwise.
    from vllm.distributed.kv_events import BlockRemoved, BlockStored
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
        KVConnectorRole,
    )

    _BASE: type = KVConnectorBase_V1
except ImportError:
    _BASE = object

    class KVConnectorRole(enum.IntEnum):  # vLLM's values
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:  # type: ignore[no-redef]
        pass

    @dataclass
    class BlockStored:  # type: ignore[no-redef]
        block_hashes: list
        parent_block_hash: Any
        token_ids: list
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None
        extra_keys: list | None = None
        group_idx: int | None = None

    @dataclass
    class BlockRemoved:  # type: ignore[no-redef]
        block_hashes: list
        medium: str | None
        group_idx: int | None = None


class KvconnectConnectorMetadata(KVConnectorMetadata):
    """What vLLM ships to the workers in its SchedulerOutput: the step number only. The step's
    jobs travel on kvconnect's step channel (one path for the metadata)."""

    def __init__(self, step: int):
        self.step = step

    def __repr__(self) -> str:
        return f"KvconnectConnectorMetadata(step={self.step})"


def _role_name(role: Any) -> str:
    name = getattr(role, "name", None)
    if name is None:
        name = KVConnectorRole(role).name
    if name not in ("SCHEDULER", "WORKER"):
        raise ValueError(f"unknown KV connector role {role!r}")
    return name


class KvconnectConnector(_BASE):  # type: ignore[misc, valid-type]
    """vLLM's KVConnectorBase_V1 over kvconnect: the scheduler role over
    kvconnect.SchedulerConnector, the worker role over kvconnect.WorkerConnector."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None):
        if _BASE is not object:
            super().__init__(vllm_config, role, kv_cache_config)
        if kv_cache_config is None:
            raise ValueError("KvconnectConnector needs vLLM's kv_cache_config")
        self._role_name = _role_name(role)
        # A worker's kv_cache_config holds its own PP stage's layers, the scheduler's stage 0's.
        rank = worker_rank(vllm_config) if self._role_name == "WORKER" else 0
        self.config = load_config(vllm_config, kv_cache_config,
                                  rank // vllm_config.parallel_config.tensor_parallel_size)
        self._scheduler: kvconnect.SchedulerConnector | None = None
        self._worker: kvconnect.WorkerConnector | None = None
        self._bound: KvconnectConnectorMetadata | None = None
        if self._role_name == "WORKER":
            # vLLM builds the workers first: the node's segment is created by whichever side
            # comes first.
            self._num_blocks = kv_cache_config.num_blocks
            self._kv_bytes = sum(t.size for t in kv_cache_config.kv_cache_tensors)
            self._stats = KvconnectConnectorStats()  # this rank's jobs since vLLM last asked
            # runtime.port 0 (the default): the port the scheduler side publishes in the node's
            # segment; a fixed one (ranks on other nodes than the scheduler side): there, at
            # runtime.host, once something answers.
            self._worker = kvconnect.WorkerConnector(self.config, rank, create_or_attach=True)
            return
        events = getattr(vllm_config, "kv_events_config", None)
        self._events_on = bool(events is not None and events.enable_kv_cache_events)
        # As vLLM's own connector: the pool's events are recorded only when vLLM takes them.
        self._scheduler = kvconnect.SchedulerConnector(self.config, create_or_attach=True,
                                                       kv_events=self._events_on)
        self._step = 0
        self.planned: kvconnect.ConnectorMetadata | None = None  # the last step's jobs

    @property
    def scheduler(self) -> kvconnect.SchedulerConnector:
        """kvconnect's scheduler side (metrics, stats, tables); scheduler role only."""
        if self._scheduler is None:
            raise RuntimeError("kvconnect.vllm: not the scheduler role")
        return self._scheduler

    @property
    def worker(self) -> kvconnect.WorkerConnector:
        """kvconnect's worker side of this rank; worker role only."""
        if self._worker is None:
            raise RuntimeError("kvconnect.vllm: not the worker role")
        return self._worker

    # --- scheduler side --------------------------------------------------------------------

    # The binding reads vLLM's objects itself (SchedulerConnector.vllm_*), the fields vLLM's
    # OffloadingConnectorScheduler reads: no per-request or per-block Python work here. It also
    # keeps each request's Request object, from get_num_new_matched_tokens to request_finished
    # (as vLLM's connector does in a dict), for build_connector_meta. The scheduler role's
    # methods call self._scheduler directly: the `scheduler` property would be a Python call
    # more on every call.

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        return self._scheduler.vllm_get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        self._scheduler.vllm_update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KvconnectConnectorMetadata:
        self._step += 1
        self.planned = self._scheduler.vllm_build_connector_meta(self._step, scheduler_output)
        return KvconnectConnectorMetadata(self._step)

    def update_connector_output(self, connector_output: Any) -> None:
        """vLLM's finished sets and invalid block ids, then what kvconnect's coordinator decided
        since (job results, deadlines, lost ranks), go through kvconnect's planner, whose answer
        replaces vLLM's sets for vLLM's scheduler to read after this call: each request once;
        with kvconnect's workers a store's outcome is the coordinator's, and a load vLLM's
        finished_recving names is settled by vLLM's word (failed iff one of its blocks was in
        invalid_block_ids), which the coordinator's later result does not change. A load the
        coordinator completed first is not released here: vLLM has read invalid_block_ids
        before this call, so the workers name it, with its blocks as load errors, in the next
        step, and vLLM's set then releases it (docs/python.md)."""
        self._scheduler.vllm_update_connector_output(connector_output)

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict | None]:
        return self._scheduler.request_finished(request.request_id), None

    def take_events(self) -> list:
        scheduler = self.scheduler  # the worker role's error, before any role's own field
        if not self._events_on:  # none recorded (vLLM's manager records none then)
            return []
        events = scheduler.take_events()
        return [BlockStored(block_hashes=hashes, parent_block_hash=None, token_ids=[],
                            block_size=0, lora_id=None, medium=medium, lora_name=None)
                if kind == "stored" else BlockRemoved(block_hashes=hashes, medium=medium)
                for kind, hashes, medium in events]

    def get_finished_count(self) -> int | None:
        """None: vLLM's aggregator expects every worker's report, as for its own connector."""
        return None

    def reset_cache(self) -> bool | None:
        """vLLM main's OffloadingConnector.reset_cache: empties the CPU tier and answers True.
        vLLM's scheduler calls it between steps (reset_prefix_cache(reset_connector=True), e.g.
        after a weight update). Transfers in flight are flushed by the workers with the next step;
        a request waiting for a load gets its finished_recving as usual, one holding its blocks
        for a store its finished_sending, and none of them reaches the emptied tier. An error
        (called mid-step, or after shutdown) raises kvconnect's exception, as vLLM main asserts."""
        self.scheduler.reset_cache()
        return True

    def shutdown(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown()
        if self._worker is not None:
            self._worker.close()

    # --- worker side ------------------------------------------------------------------------

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        """True, as vLLM's OffloadingConnector: where the model allows it (one KV-cache group of
        attention layers of one page size, an attention backend with a num_layers dimension),
        vLLM allocates one KV cache whose block holds every layer's K and V together and calls
        register_cross_layers_kv_cache, so a block moves as one copy instead of one per layer
        (and K/V half)."""
        return True

    def register_kv_caches(self, kv_caches: dict) -> None:
        """The rank's KV tensors (torch, or anything with data_ptr(), shape, stride(),
        element_size()); then the rank joins the scheduler side in the background (vLLM builds
        the scheduler after this returns)."""
        self.worker.register_kv_caches(list(kv_caches.values()), self._num_blocks)
        self.worker.register_in_background()

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: Any) -> None:
        """vLLM's cross-layer KV cache (prefer_cross_layer_blocks): one contiguous tensor in
        the attention backend's physical order. As vLLM's OffloadingConnector, it needs the
        blocks to be the outermost physical dimension (then block b is the b-th num_blocks-th of
        the tensor's bytes), which the backend's shape and stride order tell; else a
        ValueError. Then the rank joins the scheduler side in the background."""
        shape = list(attn_backend.get_kv_cache_shape(num_blocks=1234, block_size=16,
                                                     num_kv_heads=1, head_size=256))
        # The blocks' dimension, after the num_layers one vLLM puts first.
        blocks_dim = shape.index(1234) + 1 if 1234 in shape else -1
        order = list(attn_backend.get_kv_cache_stride_order(include_num_layers_dimension=True))
        if blocks_dim not in order or order.index(blocks_dim) != 0:
            raise ValueError(
                f"kvconnect.vllm: a cross-layer KV cache must keep the blocks outermost; "
                f"{getattr(attn_backend, '__name__', attn_backend)} orders the dimensions "
                f"{tuple(order)} of (num_layers,) + {tuple(shape)} with 1234 blocks")
        nbytes = kv_cache.numel() * kv_cache.element_size()
        if nbytes != self._kv_bytes:
            raise ValueError(f"kvconnect.vllm: a cross-layer KV cache of {nbytes} bytes; vLLM's "
                             f"kv_cache_config has {self._kv_bytes} in its KV cache tensors")
        self.worker.register_cross_layers_kv_cache(kv_cache, self._num_blocks)
        self.worker.register_in_background()

    def bind_connector_metadata(self, connector_metadata: KvconnectConnectorMetadata) -> None:
        if _BASE is not object:
            super().bind_connector_metadata(connector_metadata)
        self.worker.bind_connector_metadata(connector_metadata.step)
        self._bound = connector_metadata

    def clear_connector_metadata(self) -> None:
        self.worker.clear_connector_metadata()
        self._bound = None
        if _BASE is not object:
            super().clear_connector_metadata()

    def handle_preemptions(self, connector_metadata: Any = None) -> None:
        self.worker.handle_preemptions()

    def start_load_kv(self, forward_context: Any = None, **kwargs: Any) -> None:
        self.worker.start_load_kv()

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None  # loads are per step, not per layer (vLLM's own connector does the same)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return None  # stores are planned per step and queued in wait_for_save

    def wait_for_save(self) -> None:
        self.worker.wait_for_save()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str], set[str]]:
        sending, recving, jobs = self.worker.get_finished(list(finished_req_ids))
        for job in jobs:
            if job.ok:
                self._stats.record(job.kind, job.bytes, job.seconds)
        return set(sending), set(recving)

    # --- vLLM's metrics (kvconnect.vllm_stats) ------------------------------------------------

    def get_kv_connector_stats(self) -> KvconnectConnectorStats | None:
        """The worker role's successful loads and stores since the last call (vLLM calls it
        after get_finished each step), or None when there were none; the scheduler role's is
        None, as vLLM's OffloadingConnector's."""
        if self._worker is None or self._stats.is_empty():
            return None
        stats, self._stats = self._stats, KvconnectConnectorStats()
        return stats

    @classmethod
    def build_kv_connector_stats(cls, data: dict | None = None) -> KvconnectConnectorStats:
        """vLLM's front end rebuilds the aggregated stats from their serialised data (checked,
        and copied: aggregating into them leaves vLLM's dict, which its Prometheus logger reads
        too, as it was)."""
        stats = KvconnectConnectorStats()
        if data is not None:
            stats.aggregate(KvconnectConnectorStats(data=data))
        return stats

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: dict, labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]
                           ) -> KvconnectPromMetrics:
        return KvconnectPromMetrics(vllm_config, metric_types, labelnames,
                                    per_engine_labelvalues)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set(self.worker.get_block_ids_with_load_errors())
