"""kvconnect.vllm.KvconnectConnector's construction: the extra config read by kvconnect's
loader (errors name the key), the pool sized as vLLM sizes it, no torch in the scheduler role.
Its answers are checked against vLLM's in test_vllm_scheduler_replay.py."""
from __future__ import annotations

import os
import sys

import pytest

import kvconnect
import vllm_standins as v
from kvconnect.vllm import KVConnectorRole, KvconnectConnector


def test_the_scheduler_role_imports_neither_torch_nor_cuda():
    c = connector({"cpu_bytes_to_use": 1 << 20}, "notorch")
    c.shutdown()
    assert "torch" not in sys.modules


def connector(extra: dict, name: str) -> KvconnectConnector:
    return KvconnectConnector(v.vllm_config(extra, f"pytest-{os.getpid()}-{name}", 4),
                              KVConnectorRole.SCHEDULER, v.kv_cache_config(64, 4096, 4))


def test_bad_extra_config_is_a_value_error_naming_the_key():
    with pytest.raises(ValueError, match="offload.evicton_policy"):
        connector({"cpu_bytes_to_use": 1 << 20, "evicton_policy": "lru"}, "typo")
    with pytest.raises(ValueError, match="runtime.job_timeout_ms"):
        connector({"cpu_bytes_to_use": 1 << 20, "runtime": {"job_timeout_ms": "soon"}}, "bad")
    with pytest.raises(ValueError, match="offload.cpu_bytes_to_use"):
        connector({"cpu_bytes_to_use": 100}, "small")  # not one block of 4096 bytes
    with pytest.raises(TypeError):
        connector({"cpu_bytes_to_use": object()}, "type")
    with pytest.raises(ValueError, match=r'runtime.faults\[0\]: .*did you mean "drop_report"'):
        connector({"cpu_bytes_to_use": 1 << 20, "runtime": {"faults": ["drop_reprot:p=1"]}},
                  "fault-typo")
    # Only a launcher kills or stops processes: no silent no-op inside vLLM.
    with pytest.raises(ValueError, match=r"runtime.faults\[1\]: kill_rank is a process fault"):
        connector({"cpu_bytes_to_use": 1 << 20,
                   "runtime": {"faults": ["drop_report:p=0.1", "kill_rank:rank=0,step=3"]}},
                  "process-fault")


def test_more_than_one_kv_cache_group_is_a_config_error_and_nothing_is_created():
    # vLLM gives a connector that is not a SupportsHMA one group (its hybrid manager off).
    cfg = v.kv_cache_config(64, 4096, 4)
    cfg.kv_cache_groups = cfg.kv_cache_groups * 2
    name = f"pytest-{os.getpid()}-groups"
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        with pytest.raises(kvconnect.ConfigError, match="2 KV-cache groups; kvconnect serves one"):
            KvconnectConnector(v.vllm_config({"cpu_bytes_to_use": 1 << 20}, name, 4), role, cfg)
    assert not [e for e in os.listdir("/dev/shm") if name in e]


def test_reset_cache_empties_the_cpu_tier_and_answers_true():
    # vLLM main's OffloadingConnector.reset_cache answers True (vLLM's Scheduler.
    # reset_connector_cache treats only False as a failed reset).
    c = connector({"cpu_bytes_to_use": 1 << 20}, "reset")
    try:
        assert c.reset_cache() is True
        assert c.scheduler.stats()["resets"] == 1
        assert c.scheduler.tables()["reset_flush"] == 0  # nothing was in flight
    finally:
        c.shutdown()
    # After shutdown the scheduler side is gone: an error, not a silent answer.
    with pytest.raises(kvconnect.Error, match="shut down") as raised:
        c.reset_cache()
    assert raised.value.code == "io_error"


def test_the_pool_is_sized_as_vllm_sizes_it():
    # vLLM: cpu_bytes_to_use // (bytes of one GPU block over the KV tensors * factor * world).
    c = KvconnectConnector(
        v.vllm_config({"cpu_bytes_to_use": 10 * 3 * 512 * 2 + 5, "block_size": 8},
                      f"pytest-{os.getpid()}-size", 4),
        KVConnectorRole.SCHEDULER, v.kv_cache_config(64, 512, 4, layers=3))
    try:
        assert c.scheduler.num_cpu_blocks == 10
    finally:
        c.shutdown()
