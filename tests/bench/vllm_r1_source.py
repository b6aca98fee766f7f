"""vLLM R1's (a269744e9f) own scheduler-side OffloadingConnector, run from a vLLM source tree
(python_scheduler_bench.py --vllm-source DIR, path "r1_source"). vLLM's files execute
unchanged: vllm/distributed/kv_transfer/kv_connector/v1/offloading/{scheduler,common}.py,
vllm/v1/kv_offload/{abstract,mediums,reuse_manager}.py, cpu/manager.py, cpu/policies/*.py,
worker/worker.py, vllm/utils/math_utils.py, and yield_req_data of kv_connector/utils.py.
Nothing of vLLM is in this repository: DIR is a tree of vLLM at R1 (docs/benchmarks.md, "The
baseline", says how to make one).

vLLM's package cannot be imported here (its __init__ needs the whole engine and its
dependencies), so before those files load, the modules they import only for type names, and
the engine's logger, are registered as stand-ins; every other module comes from DIR:
- vllm.logger: init_logger is logging.getLogger (vLLM's returns a logging.Logger too; the
  connector's debug calls cost what they cost in vLLM, below DEBUG);
- vllm.distributed.kv_events: BlockStored and BlockRemoved are the classes kvconnect.vllm
  returns when vLLM is not importable, so both connectors build the same events;
- vllm.distributed.kv_transfer.kv_connector.utils: vLLM's own yield_req_data, compiled from that
  file alone (the rest of the file needs the engine);
- KVConnectorMetadata, KVCacheBlocks, SchedulerOutput, KVConnectorOutput, Request,
  OffloadingSpec, KVCacheEvent (annotations and a base class only): empty classes.
Spec stands for CPUOffloadingSpec (the fields the scheduler reads, and get_manager as
cpu/spec.py builds the manager); connector() gives offloading_connector.py's class in the
scheduler role (reference_connector's frame: each call asserts the role and goes to the
scheduler).
"""
from __future__ import annotations

import ast
import collections.abc
import importlib
import logging
import sys
import types
from pathlib import Path

import reference_connector

PACKAGES = (
    "vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
    "vllm.distributed.kv_transfer.kv_connector", "vllm.distributed.kv_transfer.kv_connector.v1",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading", "vllm.v1", "vllm.v1.core",
    "vllm.v1.core.sched", "vllm.utils", "vllm.v1.kv_offload", "vllm.v1.kv_offload.cpu",
    "vllm.v1.kv_offload.cpu.policies", "vllm.v1.kv_offload.worker")
SCHEDULER = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"
MANAGER = "vllm.v1.kv_offload.cpu.manager"
REUSE = "vllm.v1.kv_offload.reuse_manager"


def _module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def _type_name(name: str) -> type:
    return type(name, (), {})


def _yield_req_data(root: Path):
    """vLLM's yield_req_data, compiled from its utils.py alone."""
    path = root / "vllm/distributed/kv_transfer/kv_connector/utils.py"
    tree = ast.parse(path.read_text(), str(path))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "yield_req_data"]
    if len(found) != 1:
        raise RuntimeError(f"{path}: no yield_req_data (not vLLM R1's source?)")
    scope = {"Iterator": collections.abc.Iterator}
    exec(compile(ast.Module(found, type_ignores=[]), str(path), "exec"), scope)
    return scope["yield_req_data"]


def check(root: str | Path) -> Path:
    """`root`, resolved; RuntimeError when it holds no vLLM offloading connector."""
    root = Path(root).resolve()
    scheduler_file = root / (SCHEDULER.replace(".", "/") + ".py")
    if not scheduler_file.is_file():
        raise RuntimeError(f"{root}: not a vLLM source tree with the offloading connector "
                           f"(no {scheduler_file.relative_to(root)})")
    return root


def check_argument(ap, paths: list[str], source: str | None) -> None:
    """The benchmarks' --vllm-source: argparse's error when path r1_source is asked without it
    or it is not vLLM's source."""
    if "r1_source" not in paths:
        return
    if not source:
        ap.error("--path r1_source needs --vllm-source DIR")
    try:
        check(source)
    except RuntimeError as e:
        ap.error(f"--vllm-source: {e}")


def load(root: str | Path, block_stored: type, block_removed: type):
    """vLLM's modules from the tree at `root`: (scheduler, CPU manager, reuse manager)."""
    root = check(root)
    if "vllm" in sys.modules:
        raise RuntimeError("vllm is imported already: run vLLM's source in a process of its own")
    for name in PACKAGES:
        _module(name, __path__=[str(root / name.replace(".", "/"))])
    _module("vllm.logger", init_logger=logging.getLogger)
    _module("vllm.distributed.kv_events", BlockStored=block_stored, BlockRemoved=block_removed,
            KVCacheEvent=_type_name("KVCacheEvent"))
    _module("vllm.distributed.kv_transfer.kv_connector.utils",
            yield_req_data=_yield_req_data(root))
    _module("vllm.distributed.kv_transfer.kv_connector.v1.base",
            KVConnectorMetadata=_type_name("KVConnectorMetadata"))
    _module("vllm.v1.core.kv_cache_manager", KVCacheBlocks=_type_name("KVCacheBlocks"))
    _module("vllm.v1.core.sched.output", SchedulerOutput=_type_name("SchedulerOutput"))
    _module("vllm.v1.outputs", KVConnectorOutput=_type_name("KVConnectorOutput"))
    _module("vllm.v1.request", Request=_type_name("Request"))
    _module("vllm.v1.kv_offload.spec", OffloadingSpec=_type_name("OffloadingSpec"))
    return tuple(importlib.import_module(m) for m in (SCHEDULER, MANAGER, REUSE))


class Spec:
    """What OffloadingConnectorScheduler reads of its CPUOffloadingSpec (vLLM's cpu/spec.py):
    one KV-cache group of gpu_block_size-token blocks, the block size factor, the hash block
    size, prefix caching, and get_manager(): vLLM's CPUOffloadingManager over num_blocks CPU
    blocks with the eviction policy, wrapped in vLLM's FilterReusedOffloadingManager when
    store_threshold >= 2, as get_manager builds them."""

    def __init__(self, modules, gpu_block_size: int, num_blocks: int, enable_events: bool,
                 block_size_factor: int = 1, hash_block_size: int | None = None,
                 enable_prefix_caching: bool = True, eviction_policy: str = "lru",
                 store_threshold: int = 0, max_tracker_size: int = 64_000):
        _, manager, reuse = modules
        self.gpu_block_size = (gpu_block_size,)
        self.block_size_factor = block_size_factor
        self.hash_block_size = hash_block_size or gpu_block_size
        self.kv_cache_config = types.SimpleNamespace(kv_cache_groups=[None])
        self.vllm_config = types.SimpleNamespace(
            cache_config=types.SimpleNamespace(enable_prefix_caching=enable_prefix_caching))
        self._manager = manager.CPUOffloadingManager(
            num_blocks=num_blocks, cache_policy=eviction_policy, enable_events=enable_events)
        if store_threshold >= 2:
            self._manager = reuse.FilterReusedOffloadingManager(
                backing=self._manager, store_threshold=store_threshold,
                max_tracker_size=max_tracker_size)

    def get_manager(self):
        return self._manager


def connector(modules, spec: Spec):
    """vLLM's OffloadingConnector in the scheduler role over vLLM's own scheduler: the frame is
    reference_connector's (offloading_connector.py's: each call asserts the role and goes to
    the scheduler)."""
    return reference_connector.OffloadingConnector(spec, modules[0].OffloadingConnectorScheduler)
