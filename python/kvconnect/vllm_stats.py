"""kvconnect's transfers in vLLM's own metrics (docs/python.md, "vLLM's metrics").

Each step vLLM asks every worker's connector for its stats (``get_kv_connector_stats``, after
``get_finished``), aggregates them over the workers, adds the scheduler side's, and ships their
``data`` to its front end, where its logger prints ``reduce()`` ("KV Transfer metrics: ...")
and its Prometheus exporter hands ``data`` to the series ``build_prom_metrics`` made. ``data``
crosses vLLM's process boundaries serialised, so it holds plain lists and numbers only.

The names are those of vLLM's OffloadingConnector: a store is ``GPU_to_CPU``, a load
``CPU_to_GPU``; R1's series ``vllm:kv_offload_total_bytes`` and ``vllm:kv_offload_total_time``
(counters) and ``vllm:kv_offload_size`` (a histogram of bytes per transfer), each with a
``transfer_type`` label, and vLLM main's per-direction ``vllm:kv_offload_{load,store}_bytes``,
``..._time`` and ``..._size``. One observation is one rank's successful load or store job: its
bytes and its seconds, as that rank's copy engine measured them (R1 records each transfer of a
worker the same way). The file tier's jobs are not among them (kvconnect's own /metrics counts
those, docs/observability.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STORE = "GPU_to_CPU"
LOAD = "CPU_to_GPU"
_TYPE_OF_KIND = {"store": STORE, "load": LOAD}
_DIRECTION = {LOAD: "load", STORE: "store"}
SIZE_BUCKETS = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6]  # vLLM's, bytes

try:  # vLLM's base classes when vLLM is importable; the same shapes otherwise.
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
        KVConnectorPromMetrics,
        KVConnectorStats,
    )

    _PROM_BASE: type = KVConnectorPromMetrics
except ImportError:
    _PROM_BASE = object

    @dataclass
    class KVConnectorStats:  # type: ignore[no-redef]
        data: dict[str, Any] = field(default_factory=dict)


def _checked(data: Any) -> dict[str, list[list]]:
    """`data` as this module writes it, {transfer type: [[bytes, seconds], ...]}, or a
    ValueError saying what is not."""
    if not isinstance(data, dict):
        raise ValueError(f"kvconnect stats: data must be a dict, got {type(data).__name__}")
    for kind, ops in data.items():
        if kind not in _DIRECTION:
            raise ValueError(f"kvconnect stats: unknown transfer type {kind!r} "
                             f"(expected {STORE!r} or {LOAD!r})")
        if not isinstance(ops, list):
            raise ValueError(f"kvconnect stats: {kind} must be a list of [bytes, seconds]")
        for op in ops:
            if (not isinstance(op, (list, tuple)) or len(op) != 2
                    or not isinstance(op[0], int) or isinstance(op[0], bool) or op[0] < 0
                    or not isinstance(op[1], (int, float)) or isinstance(op[1], bool)
                    or op[1] < 0):
                raise ValueError(f"kvconnect stats: {kind}: {op!r} is not "
                                 f"[bytes >= 0, seconds >= 0]")
    return data


@dataclass
class KvconnectConnectorStats(KVConnectorStats):
    """vLLM's KVConnectorStats of kvconnect: ``data`` is {transfer type: [[bytes, seconds],
    ...]}, one entry per rank's successful job."""

    def __post_init__(self):
        _checked(self.data)

    def reset(self) -> None:
        self.data = {}

    def record(self, kind: str, num_bytes: int, seconds: float) -> bool:
        """One finished job of this rank (a kvconnect.RankJobResult's kind, bytes, seconds);
        False for a kind vLLM has no transfer type for (the file tier's)."""
        transfer_type = _TYPE_OF_KIND.get(kind)
        if transfer_type is None:
            return False
        self.data.setdefault(transfer_type, []).append([num_bytes, seconds])
        return True

    def aggregate(self, other: KVConnectorStats) -> KvconnectConnectorStats:
        for transfer_type, ops in _checked(other.data).items():
            self.data.setdefault(transfer_type, []).extend(list(op) for op in ops)
        return self

    def reduce(self) -> dict[str, int | float]:
        """R1's summary: <type>_total_bytes and <type>_total_time (seconds) per transfer type."""
        out: dict[str, int | float] = {}
        for transfer_type, ops in self.data.items():
            out[f"{transfer_type}_total_bytes"] = sum(b for b, _ in ops)
            out[f"{transfer_type}_total_time"] = sum(s for _, s in ops)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.values())


class KvconnectPromMetrics(_PROM_BASE):  # type: ignore[misc, valid-type]
    """vLLM's KVConnectorPromMetrics of kvconnect: R1's transfer_type-labelled series and
    main's per-direction ones, made with the metric classes vLLM passes (``metric_types``,
    keyed by prometheus_client's Counter, Gauge, Histogram) under vLLM's label names."""

    def __init__(self, vllm_config: Any, metric_types: dict, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]):
        if _PROM_BASE is not object:
            super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        made = {kind.__name__: cls for kind, cls in metric_types.items()}
        counter, histogram = made["Counter"], made["Histogram"]
        self.per_engine_labelvalues = per_engine_labelvalues
        typed = list(labelnames) + ["transfer_type"]
        self._by_type = (
            counter(name="vllm:kv_offload_total_bytes",
                    documentation="Number of bytes offloaded by KV connector", labelnames=typed),
            counter(name="vllm:kv_offload_total_time",
                    documentation="Total time measured by all KV offloading operations",
                    labelnames=typed),
            histogram(name="vllm:kv_offload_size",
                      documentation="Histogram of KV offload transfer size, in bytes.",
                      buckets=SIZE_BUCKETS[:], labelnames=typed),
        )
        self._by_direction = {}
        for transfer_type, d in _DIRECTION.items():
            way = "loaded from offload storage to GPU" if d == "load" else \
                "stored from GPU to offload storage"
            self._by_direction[transfer_type] = (
                counter(name=f"vllm:kv_offload_{d}_bytes", documentation=f"Total bytes {way}.",
                        labelnames=list(labelnames)),
                counter(name=f"vllm:kv_offload_{d}_time",
                        documentation=f"Total {d} time, in seconds.",
                        labelnames=list(labelnames)),
                histogram(name=f"vllm:kv_offload_{d}_size",
                          documentation=f"Histogram of KV offload {d} operation size, in bytes.",
                          buckets=SIZE_BUCKETS[:], labelnames=list(labelnames)),
            )
        self._bound: dict[tuple[int, str], list[tuple]] = {}

    def _series(self, engine_idx: int, transfer_type: str) -> list[tuple]:
        """The (bytes counter, seconds counter, size histogram) triples of one engine and type,
        bound to their label values once."""
        key = (engine_idx, transfer_type)
        if key not in self._bound:
            values = list(self.per_engine_labelvalues[engine_idx])
            self._bound[key] = [
                tuple(m.labels(*values, transfer_type) for m in self._by_type),
                tuple(m.labels(*values) for m in self._by_direction[transfer_type]),
            ]
        return self._bound[key]

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for transfer_type, ops in _checked(transfer_stats_data).items():
            for num_bytes, seconds in ops:
                for total_bytes, total_time, size in self._series(engine_idx, transfer_type):
                    total_bytes.inc(num_bytes)
                    total_time.inc(seconds)
                    size.observe(num_bytes)
