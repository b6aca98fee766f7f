"""Stand-ins for the vLLM objects kvconnect.vllm reads, carrying exactly the fields vLLM's own
OffloadingConnectorScheduler reads from them (docs/python.md), and nothing else: a connector that
reads another field fails here with AttributeError."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class KVTransferConfig:
    kv_connector_extra_config: dict
    engine_id: str


@dataclass
class CacheConfig:
    block_size: int  # the hash block size (Request.block_hashes' granularity)
    enable_prefix_caching: bool


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_rank: int = 0
    rank: int = 0  # the worker's global rank (pp_rank * tp + tp_rank)


@dataclass
class KVEventsConfig:
    enable_kv_cache_events: bool = True


@dataclass
class ModelConfig:
    """vLLM's ModelConfig: the model's hidden layers (read with PP only, to size the pool)."""
    total_num_hidden_layers: int = 1

    def get_total_num_hidden_layers(self) -> int:
        return self.total_num_hidden_layers


@dataclass
class VllmConfig:
    kv_transfer_config: KVTransferConfig
    cache_config: CacheConfig
    parallel_config: ParallelConfig
    kv_events_config: KVEventsConfig
    model_config: ModelConfig = field(default_factory=ModelConfig)


@dataclass
class KVCacheSpec:
    block_size: int


@dataclass
class KVCacheGroupSpec:
    kv_cache_spec: KVCacheSpec


@dataclass
class KVCacheTensor:
    size: int


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list
    kv_cache_groups: list


class Request:
    """vLLM's Request. Its num_tokens is a property (len of its token list in vLLM): a read is a
    Python call, as in vLLM; settable here, where the tests move it themselves."""

    def __init__(self, request_id: str, block_hashes: list, num_tokens: int,
                 num_computed_tokens: int, kv_transfer_params: dict | None):
        self.request_id = request_id
        self.block_hashes = block_hashes  # bytes; only ever appended to
        self._num_tokens = num_tokens
        self.num_computed_tokens = num_computed_tokens
        self.kv_transfer_params = kv_transfer_params

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    @num_tokens.setter
    def num_tokens(self, n: int) -> None:
        self._num_tokens = n

    def __repr__(self) -> str:
        return (f"Request({self.request_id!r}, num_tokens={self.num_tokens}, "
                f"num_computed_tokens={self.num_computed_tokens})")


@dataclass(slots=True)
class KVCacheBlock:
    """vLLM's KVCacheBlock, a slots dataclass whose block_hash is a property (None when the
    block is not cached): reading it is a Python call, as in vLLM."""
    block_id: int
    _block_hash: Any
    is_null: bool

    @property
    def block_hash(self) -> Any:
        return self._block_hash


@dataclass
class KVCacheBlocks:
    blocks: tuple


@dataclass
class NewRequestData:
    req_id: str
    block_ids: tuple
    num_computed_tokens: int  # the Request's, when vLLM's scheduler built the output


@dataclass
class CachedRequestData:
    req_ids: list
    resumed_req_ids: set
    new_block_ids: list
    num_computed_tokens: list  # per request: the Request's, when the output was built


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict
    finished_req_ids: set
    preempted_req_ids: list  # a set in vLLM; a list fixes its order (as the traces do)


@dataclass
class KVConnectorOutput:
    finished_sending: Any = None
    finished_recving: Any = None
    invalid_block_ids: set = field(default_factory=set)
    kv_connector_stats: Any = None  # the workers' get_kv_connector_stats, aggregated


class _Metric:
    """prometheus_client's metric classes as vLLM's KVConnectorProm passes them to a
    connector's build_prom_metrics (prom_metric_types): every metric made is kept in its class's
    `made` by name, with its label names, buckets and, per label values, its increments (a
    counter) or observations (a histogram)."""

    made: dict[str, _Metric]

    def __init__(self, name: str, documentation: str, labelnames: list[str],
                 buckets: list[float] | None = None):
        assert name not in self.made, f"{name} registered twice"
        assert documentation
        self.name, self.labelnames, self.buckets = name, list(labelnames), buckets
        self.values: dict[tuple, list] = {}
        self.made[name] = self

    def labels(self, *values) -> _Metric._Child:
        assert len(values) == len(self.labelnames), (self.name, values, self.labelnames)
        return _Metric._Child(self.values.setdefault(tuple(str(x) for x in values), []))

    class _Child:
        def __init__(self, seen: list):
            self.seen = seen

        def inc(self, amount: float = 1) -> None:
            assert amount >= 0
            self.seen.append(amount)

        def observe(self, value: float) -> None:
            self.seen.append(value)


class Counter(_Metric):
    pass


class Gauge(_Metric):
    pass


class Histogram(_Metric):
    pass


def prom_metric_types() -> tuple[dict, dict[str, _Metric]]:
    """vLLM's metric_types ({Counter: class, Gauge: class, Histogram: class}, fresh classes of
    one registry) and that registry."""
    made: dict[str, _Metric] = {}
    return {kind: type(kind.__name__, (kind,), {"made": made})
            for kind in (Counter, Gauge, Histogram)}, made


def vllm_config(extra: dict, engine_id: str, hash_block_size: int, prefix_caching: bool = True,
                tp: int = 1, pp: int = 1, num_layers: int = 1) -> VllmConfig:
    return VllmConfig(KVTransferConfig(extra, engine_id), CacheConfig(hash_block_size,
                                                                      prefix_caching),
                      ParallelConfig(tp, pp), KVEventsConfig(True), ModelConfig(num_layers))


def kv_cache_config(num_blocks: int, page_bytes: int, gpu_block_size: int,
                    layers: int = 1) -> KVCacheConfig:
    """`layers` per-layer tensors of num_blocks pages of page_bytes each."""
    return KVCacheConfig(num_blocks, [KVCacheTensor(num_blocks * page_bytes)] * layers,
                         [KVCacheGroupSpec(KVCacheSpec(gpu_block_size))])


class FlashAttentionBackend:
    """vLLM's FlashAttentionBackend as a cross-layer KV cache sees it (NHD layout): the logical
    shape of one layer's cache and the physical order of (num_layers,) + that shape."""

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                           cache_dtype_str: str = "auto") -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension: bool = False) -> tuple[int, ...]:
        # (num_blocks, num_layers, 2, block_size, num_kv_heads, head_size) in memory
        return (2, 0, 1, 3, 4, 5) if include_num_layers_dimension else (0, 1, 2, 3, 4)


class LayersOutermostBackend(FlashAttentionBackend):
    """A backend whose cross-layer order keeps the layers outermost: a block's bytes are not
    together."""

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension: bool = False) -> tuple[int, ...]:
        return (0, 1, 2, 3, 4, 5) if include_num_layers_dimension else (0, 1, 2, 3, 4)


class NoBlocksBackend(FlashAttentionBackend):
    """A backend whose cache shape has no blocks dimension."""

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                           cache_dtype_str: str = "auto") -> tuple[int, ...]:
        return (2, block_size, num_kv_heads, head_size)
