"""kvconnect.vllm_stats: the stats kvconnect's vLLM connector hands vLLM (KVConnectorStats) and
the Prometheus series it makes for vLLM's front end (KVConnectorPromMetrics), on their own;
end to end through vLLM's stats path in test_vllm_connector_observe.py."""
from __future__ import annotations

import json

import pytest

import vllm_standins as v
from kvconnect.vllm import KvconnectConnector
from kvconnect.vllm_stats import KvconnectConnectorStats


def test_a_ranks_jobs_are_recorded_by_vllms_transfer_type_and_the_file_tiers_are_not():
    s = KvconnectConnectorStats()
    assert s.is_empty()
    assert s.record("store", 4096, 0.5) and s.record("load", 1024, 0.25)
    assert s.record("store", 2048, 0.125)
    for kind in ("cascade", "promotion", "check"):
        assert not s.record(kind, 1, 1.0)
    assert s.data == {"GPU_to_CPU": [[4096, 0.5], [2048, 0.125]], "CPU_to_GPU": [[1024, 0.25]]}
    assert s.reduce() == {"GPU_to_CPU_total_bytes": 6144, "GPU_to_CPU_total_time": 0.625,
                          "CPU_to_GPU_total_bytes": 1024, "CPU_to_GPU_total_time": 0.25}


def test_aggregate_keeps_every_ranks_observations_and_survives_serialisation():
    a, b = KvconnectConnectorStats(), KvconnectConnectorStats()
    a.record("store", 100, 1.0)
    b.record("store", 200, 2.0)
    b.record("load", 300, 3.0)
    a.aggregate(b)
    assert a.data == {"GPU_to_CPU": [[100, 1.0], [200, 2.0]], "CPU_to_GPU": [[300, 3.0]]}
    b.record("load", 1, 1.0)  # b's later records do not reach a
    assert a.data["CPU_to_GPU"] == [[300, 3.0]]
    # The front end's rebuild of the serialised data (JSON: plain lists and numbers).
    rebuilt = KvconnectConnector.build_kv_connector_stats(json.loads(json.dumps(a.data)))
    assert rebuilt.data == a.data and rebuilt.reduce() == a.reduce()
    data = {"GPU_to_CPU": [[1, 1.0]]}
    KvconnectConnector.build_kv_connector_stats(data).aggregate(a)
    assert data == {"GPU_to_CPU": [[1, 1.0]]}  # vLLM's dict, which its Prometheus logger reads
    assert KvconnectConnector.build_kv_connector_stats().is_empty()
    assert KvconnectConnector.build_kv_connector_stats({}).is_empty()


@pytest.mark.parametrize("data, why", [
    ([], "data must be a dict"),
    ({"GPU_to_DISK": []}, "unknown transfer type 'GPU_to_DISK'"),
    ({"GPU_to_CPU": 5}, "GPU_to_CPU must be a list"),
    ({"GPU_to_CPU": [[1]]}, r"\[1\] is not \[bytes >= 0, seconds >= 0\]"),
    ({"GPU_to_CPU": [["1", 0.5]]}, "is not"),
    ({"GPU_to_CPU": [[-1, 0.5]]}, "is not"),
    ({"CPU_to_GPU": [[1, -0.5]]}, "is not"),
    ({"CPU_to_GPU": [[True, 0.5]]}, "is not"),
])
def test_bad_data_is_one_value_error_saying_what(data, why):
    with pytest.raises(ValueError, match=why):
        KvconnectConnector.build_kv_connector_stats(data)
    good = KvconnectConnectorStats()
    good.record("load", 1, 1.0)
    bad = KvconnectConnectorStats()
    bad.data = data
    with pytest.raises(ValueError, match=why):
        good.aggregate(bad)
    assert good.data == {"CPU_to_GPU": [[1, 1.0]]}  # nothing taken from it
    metric_types, made = v.prom_metric_types()
    prom = KvconnectConnector.build_prom_metrics(None, metric_types, ["engine"], {0: ["0"]})
    with pytest.raises(ValueError, match=why):
        prom.observe(data, 0)
    assert all(not m.values for m in made.values())


def test_the_series_are_per_engine_with_vllms_labels():
    metric_types, made = v.prom_metric_types()
    prom = KvconnectConnector.build_prom_metrics(None, metric_types, ["model_name", "engine"],
                                                 {0: ["m", "0"], 1: ["m", "1"]})
    assert sorted(made) == sorted([
        "vllm:kv_offload_total_bytes", "vllm:kv_offload_total_time", "vllm:kv_offload_size",
        "vllm:kv_offload_load_bytes", "vllm:kv_offload_load_time", "vllm:kv_offload_load_size",
        "vllm:kv_offload_store_bytes", "vllm:kv_offload_store_time",
        "vllm:kv_offload_store_size"])
    assert [type(made[n]).__name__ for n in ("vllm:kv_offload_total_bytes",
                                             "vllm:kv_offload_size")] == ["Counter", "Histogram"]
    prom.observe({"GPU_to_CPU": [[10, 0.5], [20, 0.25]]}, 0)
    prom.observe({"CPU_to_GPU": [[30, 1.0]]}, 1)
    assert made["vllm:kv_offload_total_bytes"].values == {("m", "0", "GPU_to_CPU"): [10, 20],
                                                          ("m", "1", "CPU_to_GPU"): [30]}
    assert made["vllm:kv_offload_store_time"].values == {("m", "0"): [0.5, 0.25]}
    assert made["vllm:kv_offload_load_size"].values == {("m", "1"): [30]}
    assert made["vllm:kv_offload_load_bytes"].values == {("m", "1"): [30]}
    assert made["vllm:kv_offload_store_size"].values == {("m", "0"): [10, 20]}
