"""kvconnect.vllm.KvconnectConnector's construction: the extra config read by kvconnect's
loader (errors name the key), the pool sized as vLLM sizes it, no torch in the scheduler role.
Its answers are checked against vLLM's in test_vllm_scheduler_replay.py."""
from __future__ import annotations

import os
import socket
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


def stage_connector(extra: dict, name: str, role, rank: int, stage_layers: int,
                    num_layers: int = 6, pp: int = 4) -> KvconnectConnector:
    """A connector of PP rank `rank` (TP 1) whose kv_cache_config holds `stage_layers` layers
    of 8 blocks of 256 bytes, of a model of `num_layers` layers."""
    config = v.vllm_config(extra, f"pytest-{os.getpid()}-{name}", 4, pp=pp,
                           num_layers=num_layers)
    config.parallel_config.rank = rank
    return KvconnectConnector(config, role, v.kv_cache_config(8, 256, 4, layers=stage_layers))


def test_uneven_pipeline_stages_share_one_pool_with_as_many_blocks_as_vllm_counts():
    torch = pytest.importorskip("torch")
    # vLLM splits 6 layers over 4 stages as [1, 2, 2, 1]: stage 0 (the scheduler's
    # kv_cache_config) is not a largest one. Every rank attaches the one segment and its
    # stage's layers fit a slot; the scheduler counts vLLM's blocks from stage 0's bytes.
    extra = {"cpu_bytes_to_use": 100_000, "offload": {"eviction_policy": "lru"},
             "runtime": {"job_timeout_ms": 0}}
    before = {k: dict(x) if isinstance(x, dict) else x for k, x in extra.items()}
    workers = []
    try:
        for rank, layers in enumerate((1, 2, 2, 1)):
            c = stage_connector(extra, "stages", KVConnectorRole.WORKER, rank, layers)
            workers.append(c)
            c.register_kv_caches({f"layer{i}": torch.zeros((2, 8, 4, 2, 8), dtype=torch.float16)
                                  for i in range(layers)})
        sched = stage_connector(extra, "stages", KVConnectorRole.SCHEDULER, 0, 1)
        try:
            assert sched.scheduler.num_cpu_blocks == 100_000 // (1 * 256 * 4)  # vLLM's count
            sched.scheduler.wait_for_workers(timeout=60)
        finally:
            sched.shutdown()
    finally:
        for c in workers:
            c.shutdown()
    assert extra == before  # vLLM's extra config is not written to


@pytest.mark.parametrize("partition, why", [
    ("1,3,1,1", r"pipeline stages of \[1, 3, 1, 1\] layers: kvconnect's slot holds "
                r"ceil\(6 / 4\) layers"),
    ("2,2,1", "is not 4 stages of 6 layers"),
    ("a,b", "is not a list of ints"),
])
def test_a_pipeline_split_kvconnect_cannot_pool_is_a_config_error(monkeypatch, partition, why):
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", partition)
    with pytest.raises(kvconnect.ConfigError, match=why):
        stage_connector({"cpu_bytes_to_use": 1 << 20}, "split", KVConnectorRole.SCHEDULER, 0, 1)


def test_a_stage_whose_bytes_are_not_its_layers_pages_is_a_config_error():
    # 5 layers over 2 stages: [3, 2]; stage 0's kv_cache_config of 613 bytes per block.
    config = v.vllm_config({"cpu_bytes_to_use": 1 << 20}, f"pytest-{os.getpid()}-odd", 4, pp=2,
                           num_layers=5)
    kv = v.kv_cache_config(8, 256, 4, layers=2)
    kv.kv_cache_tensors = kv.kv_cache_tensors + [v.KVCacheTensor(808)]
    with pytest.raises(kvconnect.ConfigError, match="613 bytes per GPU block on pipeline stage 0 "
                                                    "are not 3 layers of one page"):
        KvconnectConnector(config, KVConnectorRole.SCHEDULER, kv)


def port_below_a_free_one() -> int:
    """A port P such that P + 1 is free now (P itself need not be)."""
    for _ in range(100):
        with socket.socket() as low, socket.socket() as high:
            low.bind(("127.0.0.1", 0))
            port = low.getsockname()[1]
            try:
                high.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise AssertionError("no port below a free one in 100 tries")


def test_a_fixed_port_is_data_parallel_rank_0s_and_rank_r_listens_at_port_plus_r():
    port = port_below_a_free_one()
    extra = {"cpu_bytes_to_use": 1 << 20, "runtime": {"host": "127.0.0.1", "port": port}}
    config = v.vllm_config(extra, f"pytest-{os.getpid()}-dp", 4)
    config.parallel_config.data_parallel_rank = 1
    c = KvconnectConnector(config, KVConnectorRole.SCHEDULER, v.kv_cache_config(64, 4096, 4))
    try:
        assert c.scheduler.port == port + 1
        assert c.scheduler.segment_name.endswith("-dp1-node0")
    finally:
        c.shutdown()
    assert extra["runtime"] == {"host": "127.0.0.1", "port": port}  # vLLM's dict as it was


def test_even_pipeline_stages_keep_one_page_per_rank_whatever_the_layers_pages():
    # 4 layers over 2 stages: [2, 2]; a kv_cache_config whose bytes are not 2 layers' pages (a
    # model whose KV layers are not its hidden layers) still gives one pool of whole blocks.
    extra = {"cpu_bytes_to_use": 100_000}
    config = v.vllm_config(extra, f"pytest-{os.getpid()}-even", 4, pp=2, num_layers=4)
    c = KvconnectConnector(config, KVConnectorRole.SCHEDULER,
                           v.kv_cache_config(8, 256, 4, layers=3))
    try:
        assert c.scheduler.num_cpu_blocks == 100_000 // (3 * 256 * 2)  # vLLM's count
    finally:
        c.shutdown()


def test_a_fixed_port_whose_data_parallel_offset_overflows_is_a_config_error():
    extra = {"cpu_bytes_to_use": 1 << 20, "runtime": {"port": 65535}}
    config = v.vllm_config(extra, f"pytest-{os.getpid()}-dp-port", 4)
    config.parallel_config.data_parallel_rank = 1
    with pytest.raises(kvconnect.ConfigError, match=r"runtime.port: 65535 \+ data-parallel rank 1 "
                                                    r"is above 65535"):
        KvconnectConnector(config, KVConnectorRole.SCHEDULER, v.kv_cache_config(64, 4096, 4))
    assert not [n for n in os.listdir("/dev/shm") if "dp-port" in n]
