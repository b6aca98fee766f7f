"""The kvconnect module: its version, the config read by the YAML file's loader, errors as
Python exceptions, Python types checked at the boundary, the scheduler side's calls, and a
rank's job results and the aggregated ones as two types."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import kvconnect


def test_version_is_the_projects():
    assert kvconnect.__version__ == os.environ["KVC_EXPECTED_VERSION"]


def test_a_dict_and_the_same_yaml_give_the_same_config():
    from_dict = kvconnect.Config({"offload": {"cpu_bytes_to_use": "1GiB",
                                              "eviction_policy": "arc"}},
                                 topology={"tensor_parallel": 4})
    from_yaml = kvconnect.Config.from_yaml(
        "topology:\n  tensor_parallel: 4\noffload:\n  cpu_bytes_to_use: 1GiB\n"
        "  eviction_policy: arc\n")
    assert from_dict == from_yaml
    assert from_dict.world_size == 4
    assert 'eviction_policy: "arc"' in from_dict.to_yaml()
    # What to_yaml prints loads back as the same config.
    assert kvconnect.Config.from_yaml(from_dict.to_yaml()) == from_dict


def test_the_engines_facts_override_the_config():
    c = kvconnect.Config({"topology": {"tensor_parallel": 4}},
                         engine={"topology": {"tensor_parallel": 2}})
    assert c.world_size == 2


def test_an_unknown_key_is_a_value_error_naming_it_with_a_suggestion():
    with pytest.raises(kvconnect.ConfigError) as e:
        kvconnect.Config({"offload": {"evicton_policy": "lru"}})
    assert isinstance(e.value, ValueError)
    assert e.value.key == "offload.evicton_policy"
    assert "eviction_policy" in str(e.value)


def test_every_bad_value_is_named():
    with pytest.raises(kvconnect.ConfigError) as e:
        kvconnect.Config(offload={"eviction_policy": "fifo", "cpu_bytes_to_use": [1]})
    keys = {k for k, _ in e.value.errors}
    assert {"offload.eviction_policy", "offload.cpu_bytes_to_use"} <= keys


def test_a_value_no_config_can_hold_is_a_type_error():
    with pytest.raises(TypeError, match="offload.cpu_bytes_to_use"):
        kvconnect.Config({"offload": {"cpu_bytes_to_use": object()}})
    with pytest.raises(TypeError):
        kvconnect.Config({1: {}})
    with pytest.raises(TypeError):
        kvconnect.Config("offload: {}")


def scheduler(tmp_instance: str) -> kvconnect.SchedulerConnector:
    config = kvconnect.Config(offload={"cpu_bytes_to_use": 8 * 4096},
                              topology={"tensor_parallel": 1},
                              kv_cache={"page_bytes": 4096, "layers": 1, "gpu_block_size": 4},
                              runtime={"job_timeout_ms": 0})
    return kvconnect.SchedulerConnector(config, instance=tmp_instance, token="t", listen=False)


@pytest.fixture
def sc():
    s = scheduler(f"pytest-{os.getpid()}-sc")
    yield s
    s.shutdown()
    assert not (Path("/dev/shm") / s.segment_name.lstrip("/")).exists()


def test_a_request_stored_then_hit(sc):
    hashes = [(i + 1).to_bytes(8, "big") for i in range(2)]
    assert sc.num_cpu_blocks == 8
    assert sc.get_num_new_matched_tokens("a", hashes, 8, 0) == (0, False)
    sc.update_state_after_alloc("a", hashes, 8, [1, 2], None, 0)
    meta = sc.build_connector_meta(1, [("a", hashes, 8, 0, 8, [1, 2], False, False)], [], [])
    assert [j.kind for j in meta.stores] == ["store"]
    assert meta.stores[0].gpu_blocks == [1, 2]
    assert sc.request_finished("a") is True  # a stored: free its blocks once sent
    sc.apply_request_output(["a"], [])
    assert sc.take_events() == [("stored", [1, 2], "CPU")]
    # b (9 tokens) shares a's two blocks: both are in the CPU pool.
    assert sc.get_num_new_matched_tokens("b", hashes, 9, 0) == (8, True)
    assert sc.stats()["stores_ok"] == 1


def test_hashes_as_ints_and_long_bytes_are_keys(sc):
    # vLLM's 32-byte hashes: the last 16 bytes make the key; a shorter one all of its bytes.
    by_bytes = [bytes(range(32)), bytes(range(1, 17)), bytes(range(2, 11))]
    hashes = by_bytes + [2**100]
    n = 4 * len(hashes)
    sc.get_num_new_matched_tokens("a", hashes, n, 0)
    sc.update_state_after_alloc("a", hashes, n, [1, 2, 3, 4], None, 0)
    sc.build_connector_meta(1, [("a", hashes, n, 0, n, [1, 2, 3, 4], False, False)], [], [])
    sc.apply_request_output(["a"], [])
    (kind, keys, medium), = sc.take_events()
    assert sorted(keys) == sorted([int.from_bytes(h[-16:], "big") for h in by_bytes] + [2**100])


def test_wrong_python_types_are_type_errors(sc):
    with pytest.raises(TypeError):
        sc.get_num_new_matched_tokens(1, [], 8, 0)
    with pytest.raises(TypeError):
        sc.get_num_new_matched_tokens("a", ["not a hash"], 8, 0)
    with pytest.raises(TypeError):
        sc.get_num_new_matched_tokens("a", [b"h"], -1, 0)
    with pytest.raises(TypeError):
        sc.build_connector_meta(1, [("a",)], [], [])
    with pytest.raises(ValueError):
        sc.get_num_new_matched_tokens("a", [2**128], 8, 0)


def test_kvconnect_errors_carry_the_status_text(sc):
    with pytest.raises(kvconnect.Error) as e:
        sc.update_state_after_alloc("unknown", [b"h"], 8, [1, 2], None, 4)
    assert e.value.code != "ok" and "unknown" in str(e.value)
    sc.build_connector_meta(1, [], [], [])
    with pytest.raises(kvconnect.Error):
        sc.build_connector_meta(1, [], [], [])  # steps must go up


def test_a_timeout_is_a_timeout_error(sc):
    with pytest.raises(TimeoutError) as e:
        sc.wait_for_workers(0.0)  # no worker of the one rank ever registers
    assert isinstance(e.value, kvconnect.Timeout)
    assert e.value.code == "timeout"


def geometry(**runtime) -> kvconnect.Config:
    return kvconnect.Config(offload={"cpu_bytes_to_use": 8 * 4096},
                            topology={"tensor_parallel": 1},
                            kv_cache={"page_bytes": 4096, "layers": 1, "gpu_block_size": 4},
                            runtime=runtime)


def test_a_worker_without_its_scheduler_is_an_error():
    with pytest.raises(kvconnect.Error) as e:
        kvconnect.WorkerConnector(geometry(port=1), 0, instance=f"pytest-{os.getpid()}-none",
                                  token="t")
    assert e.value.code == "io_error" and "cannot reach the scheduler" in str(e.value)
    with pytest.raises(ValueError):
        kvconnect.WorkerConnector(geometry(port=1), 1, instance="x", token="t")  # rank >= TP


def test_kv_tensors_are_checked_at_the_boundary():
    torch = pytest.importorskip("torch")
    instance = f"pytest-{os.getpid()}-kv"
    with kvconnect.SchedulerConnector(geometry(), instance=instance, token="t") as s:
        with kvconnect.WorkerConnector(geometry(port=s.port), 0, instance=instance,
                                       token="t") as w:
            with pytest.raises(TypeError, match="data_ptr"):
                w.register_kv_caches([b"not a tensor"], 16)
            with pytest.raises(ValueError, match="num_blocks = 16"):
                w.register_kv_caches([torch.zeros((2, 15, 4, 256), dtype=torch.float16)], 16)
            # One block of (2, 4, 256) fp16 is 4096 bytes: it fits a slot.
            w.register_kv_caches([torch.zeros((2, 16, 4, 256), dtype=torch.float16)], 16)
            w.register_with_scheduler()
            s.wait_for_workers(30.0)


def test_a_ranks_job_results_and_the_aggregated_ones_are_two_types():
    torch = pytest.importorskip("torch")
    instance = f"pytest-{os.getpid()}-results"
    hashes = [(i + 1).to_bytes(8, "big") for i in range(2)]
    with kvconnect.SchedulerConnector(geometry(), instance=instance, token="t") as s:
        with kvconnect.WorkerConnector(geometry(port=s.port), 0, instance=instance,
                                       token="t") as w:
            w.register_kv_caches([torch.zeros((2, 16, 4, 256), dtype=torch.float16)], 16)
            w.register_with_scheduler()
            s.wait_for_workers(30.0)
            assert s.get_num_new_matched_tokens("a", hashes, 8, 0) == (0, False)
            s.update_state_after_alloc("a", hashes, 8, [1, 2], None, 0)
            meta = s.build_connector_meta(1, [("a", hashes, 8, 0, 8, [1, 2], False, False)], [],
                                          [])
            (store,) = [j.id for j in meta.stores]
            assert w.bind_connector_metadata(1, 30.0) == 1
            w.wait_for_save()
            w.finish_transfers()  # submits the queued store and waits for it
            _, _, ranks = w.get_finished([])
            w.clear_connector_metadata()
            update = s.update_connector_output(1, 30.0)
    # The worker hands out its rank's own results; the scheduler side the coordinator's.
    (mine,) = ranks
    assert type(mine) is kvconnect.RankJobResult
    assert (mine.job, mine.kind, mine.ok, mine.error, mine.bytes, mine.detail) == \
        (store, "store", True, "ok", 2 * 4096, "")
    (everyone,) = update.jobs
    assert type(everyone) is kvconnect.JobResult
    assert (everyone.job, everyone.kind, everyone.ok, everyone.error, everyone.bytes) == \
        (store, "store", True, "ok", 2 * 4096)
