"""vLLM's pipeline stages as kvconnect's pool must see them (docs/python.md, "Pipeline stages").

vLLM splits the model's hidden layers over the PP stages (``get_pp_indices``: evenly, the
remainder to the stages before the last, or ``VLLM_PP_LAYER_PARTITION``), and each worker's
kv_cache_config holds its own stage's layers; the scheduler's is worker 0's (stage 0), and it
sizes the CPU pool from that stage's bytes per block: ``cpu_bytes_to_use // (bytes per block ×
world size × block-size factor)`` blocks. kvconnect's pool has one slot size for every rank, so
with stages of different layer counts the slot must hold the largest stage's block, and every
side of one engine must derive the same pool: the page of one layer (a stage's bytes per block
over its layers) and the model's layer count (a rank holds ceil(layers / PP) of them, the
largest stage of vLLM's own split), with as many CPU blocks as vLLM's scheduler counts.
"""
from __future__ import annotations

import os
from typing import Any

import kvconnect


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


def rank_geometry(vllm_config: Any, rank_bytes: int, stage: int) -> tuple[int, int, int]:
    """(kv_cache.layers, kv_cache.page_bytes, stage 0's bytes per block) for kvconnect's config
    of a rank of PP `stage` whose kv_cache_config gives `rank_bytes` per GPU block."""
    pp = vllm_config.parallel_config.pipeline_parallel_size
    if pp == 1:
        return 1, rank_bytes, rank_bytes
    num_layers = vllm_config.model_config.get_total_num_hidden_layers()
    if not isinstance(num_layers, int) or num_layers < pp:
        raise kvconnect.ConfigError(
            f"model_config: {num_layers!r} hidden layers over {pp} pipeline stages")
    stages = stage_layers(num_layers, pp)
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
