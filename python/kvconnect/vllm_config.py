"""kvconnect's config of a vLLM engine (docs/python.md, "vLLM's facts" and "Pipeline stages"):
the extra config read as the YAML file's keys, vLLM's facts as the engine's overrides, and the
rank's place in vLLM's parallelism.

Pipeline stages: vLLM splits the model's hidden layers over the PP stages (``get_pp_indices``:
evenly, the remainder to the stages before the last, or ``VLLM_PP_LAYER_PARTITION``), and each
worker's kv_cache_config holds its own stage's layers; the scheduler's is worker 0's (stage 0),
and it sizes the CPU pool from that stage's bytes per block: ``cpu_bytes_to_use // (bytes per
block × world size × block-size factor)`` blocks. kvconnect's pool has one slot size for every
rank, so with stages of different layer counts the slot must hold the largest stage's block, and
every side of one engine must derive the same pool: the page of one layer (a stage's bytes per
block over its layers) and the model's layer count (a rank holds ceil(layers / PP) of them, the
largest stage of vLLM's own split), with as many CPU blocks as vLLM's scheduler counts.
"""
from __future__ import annotations

import os
from typing import Any

import kvconnect


def worker_rank(vllm_config: Any) -> int:
    """The rank's global rank, pp_rank * tp_size + tp_rank: from vLLM's parallel state once it
    is initialised (a vLLM worker), else parallel_config.rank."""
    try:
        from vllm.distributed import parallel_state as ps
    except ImportError:
        ps = None
    if ps is not None and ps.model_parallel_is_initialized():
        tp = vllm_config.parallel_config.tensor_parallel_size
        return ps.get_pp_group().rank_in_group * tp + ps.get_tp_group().rank_in_group
    return vllm_config.parallel_config.rank


def load_config(vllm_config: Any, kv_cache_config: Any, stage: int = 0) -> kvconnect.Config:
    """kvconnect's config of this vLLM engine: the extra config as the YAML file's keys (see
    kvconnect.vllm's docstring), vLLM's facts as the engine's overrides. `stage`: the PP stage whose
    layers kv_cache_config holds (a worker's own; the scheduler's is stage 0's)."""
    transfer = vllm_config.kv_transfer_config
    extra = dict(transfer.kv_connector_extra_config or {})
    sections = set(kvconnect.config_sections())
    # The sections copied: what is added below must not reach vLLM's extra config.
    config: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v
                              for k, v in extra.items() if k in sections}
    offload = config.setdefault("offload", {})
    if not isinstance(offload, dict):
        raise TypeError(f"kv_connector_extra_config: offload must be a dict, got "
                        f"{type(offload).__name__}")
    offload.update({k: v for k, v in extra.items() if k not in sections})
    # Both sides of one engine derive the same instance and token from vLLM's config.
    runtime = config.setdefault("runtime", {})
    if isinstance(runtime, dict):
        dp_rank = getattr(vllm_config.parallel_config, "data_parallel_rank", 0) or 0
        runtime.setdefault("instance", f"vllm-{transfer.engine_id}-dp{dp_rank}")
        runtime.setdefault("token", os.environ.get("KVCONNECT_TOKEN") or str(transfer.engine_id))
        # A fixed port (ranks on other nodes) is data-parallel rank 0's; rank r's scheduler side
        # listens at port + r, so that DP engines sharing the extra config do not collide.
        port = runtime.get("port")
        if isinstance(port, int) and not isinstance(port, bool) and port > 0:
            if port + dp_rank > 65535:
                raise kvconnect.ConfigError(
                    f"runtime.port: {port} + data-parallel rank {dp_rank} is above 65535 (DP rank "
                    f"r listens at runtime.port + r)")
            runtime["port"] = port + dp_rank

    # KvconnectConnector is not a SupportsHMA, as vLLM R1's OffloadingConnector is not: vLLM
    # turns its hybrid KV-cache manager off for such a connector and gives it one group
    # (vllm/config/vllm.py, R1 and main). More come only from a kv_cache_config built otherwise.
    groups = kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        raise kvconnect.ConfigError(
            f"kv_cache_config has {len(groups)} KV-cache groups; kvconnect serves one (it does "
            f"not support vLLM's hybrid KV-cache manager, which vLLM turns off for it)")
    parallel = vllm_config.parallel_config
    cache = vllm_config.cache_config
    num_blocks = kv_cache_config.num_blocks
    total_bytes = sum(t.size for t in kv_cache_config.kv_cache_tensors)
    gpu_block_size = groups[0].kv_cache_spec.block_size
    # Uneven PP stages: one page per layer of the model, the slot a rank's ceil(layers / PP) of
    # them, so every stage derives the same pool, with as many blocks as vLLM's scheduler counts
    # (rank_geometry; stage0_bytes None: one page per rank, the pool as the config sizes it).
    layers, page, stage0_bytes = rank_geometry(
        vllm_config, total_bytes // num_blocks if num_blocks > 0 else 0, stage)
    if stage0_bytes is not None:
        block_size = offload.get("block_size", gpu_block_size)
        factor = block_size // gpu_block_size if isinstance(block_size, int) else 0
        offload["cpu_bytes_to_use"] = pool_bytes(
            offload.get("cpu_bytes_to_use"), stage0_bytes,
            -(-layers // parallel.pipeline_parallel_size), page,
            parallel.tensor_parallel_size * parallel.pipeline_parallel_size, factor)
    engine = {
        "topology": {
            "tensor_parallel": parallel.tensor_parallel_size,
            "pipeline_parallel": parallel.pipeline_parallel_size,
        },
        "kv_cache": {
            # vLLM sizes the pool from the bytes of one GPU block over all of the rank's KV
            # tensors: without PP one page per rank.
            "layers": layers,
            "page_bytes": page,
            "gpu_block_size": gpu_block_size,
            "hash_block_size": cache.block_size,
            "gpu_blocks": num_blocks,
            "enable_prefix_caching": bool(cache.enable_prefix_caching),
        },
    }
    return kvconnect.Config(config, engine=engine)


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """The hidden layers of each PP stage, as vLLM splits them: vLLM's own get_pp_indices when
    vLLM is importable, else its rule (VLLM_PP_LAYER_PARTITION, or num_layers // pp each and the
    remainder one each to the stages before the last, from the last but one backwards)."""
    try:
        from vllm.distributed.utils import get_pp_indices
    except ImportError:
        get_pp_indices = None
    if get_pp_indices is not None:
        return [end - start for start, end in (get_pp_indices(num_layers, r, pp)
                                               for r in range(pp))]
    override = os.environ.get("VLLM_PP_LAYER_PARTITION")
    if override is not None:
        try:
            parts = [int(x) for x in override.split(",")]
        except ValueError as err:
            raise kvconnect.ConfigError(
                f"VLLM_PP_LAYER_PARTITION={override!r} is not a list of ints") from err
        if len(parts) != pp or sum(parts) != num_layers or min(parts) < 1:
            raise kvconnect.ConfigError(
                f"VLLM_PP_LAYER_PARTITION={override!r} is not {pp} stages of {num_layers} "
                f"layers")
        return parts
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def rank_geometry(vllm_config: Any, rank_bytes: int,
                  stage: int) -> tuple[int, int, int | None]:
    """(kv_cache.layers, kv_cache.page_bytes, stage 0's bytes per block) for kvconnect's config
    of a rank of PP `stage` whose kv_cache_config gives `rank_bytes` per GPU block. No PP, or
    stages of one layer count: one page per rank and stage, whatever the layers' pages (every
    rank's block is the same), and None for stage 0's bytes (the pool needs no rescaling); else
    one page per layer of the model."""
    pp = vllm_config.parallel_config.pipeline_parallel_size
    if pp == 1:
        return 1, rank_bytes, None
    num_layers = vllm_config.model_config.get_total_num_hidden_layers()
    if not isinstance(num_layers, int) or num_layers < pp:
        raise kvconnect.ConfigError(
            f"model_config: {num_layers!r} hidden layers over {pp} pipeline stages")
    stages = stage_layers(num_layers, pp)
    if len(set(stages)) == 1:
        return pp, rank_bytes, None
    here = stages[stage]
    if rank_bytes % here != 0:
        raise kvconnect.ConfigError(
            f"kv_cache_config: {rank_bytes} bytes per GPU block on pipeline stage {stage} are "
            f"not {here} layers of one page")
    page = rank_bytes // here
    if max(stages) > -(-num_layers // pp):
        raise kvconnect.ConfigError(
            f"pipeline stages of {stages} layers: kvconnect's slot holds ceil({num_layers} / "
            f"{pp}) layers of a rank")
    return num_layers, page, stages[0] * page


def pool_bytes(cpu_bytes: Any, stage0_bytes: int, slot_layers: int, page: int, world: int,
               factor: int) -> Any:
    """cpu_bytes_to_use for kvconnect's pool of slots of `slot_layers` pages: as many CPU
    blocks as vLLM's scheduler counts from stage 0's bytes per block (its pool is then larger
    than cpu_bytes_to_use where stage 0 is not a largest stage). A value that is not an int of
    bytes is left to kvconnect's loader."""
    if not isinstance(cpu_bytes, int) or isinstance(cpu_bytes, bool) or factor < 1:
        return cpu_bytes
    blocks = cpu_bytes // (stage0_bytes * world * factor)
    if blocks == 0:
        return cpu_bytes  # the loader's error: not one block
    return blocks * world * factor * slot_layers * page
