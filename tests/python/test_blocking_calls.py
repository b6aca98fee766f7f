"""The GIL is released in the calls that wait, so Python threads make progress meanwhile; and a
recorded run refuses job results from outside the step channel.

Each wait below can only end through another thread's Python code: a scheduler and a worker
of one process (over loopback TCP), one thread inside a waiting call, the main thread doing
what ends that wait. A call that kept the GIL while waiting would leave the main thread unable
to run, and the wait would end by its own 60 s limit with an error instead. The handshakes are
threading.Event objects; nothing sleeps.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

import kvconnect

torch = pytest.importorskip("torch")

LIMIT_S = 60.0  # every wait's own limit: reached only when the other thread could not run


def geometry(**observe) -> kvconnect.Config:
    return kvconnect.Config(offload={"cpu_bytes_to_use": 8 * 4096},
                            topology={"tensor_parallel": 1},
                            kv_cache={"page_bytes": 4096, "layers": 1, "gpu_block_size": 4},
                            runtime={"job_timeout_ms": 0}, observe=observe)


class InThread:
    """Runs `call` on a thread of its own; `entered` is set just before the call."""

    def __init__(self, call):
        self.entered = threading.Event()
        self.result, self.error = None, None

        def run():
            self.entered.set()
            try:
                self.result = call()
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                self.error = e

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.entered.wait(LIMIT_S)

    def outcome(self):
        self.thread.join(LIMIT_S)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


def test_waiting_calls_release_the_gil_while_they_wait():
    instance = f"pytest-{os.getpid()}-gil"
    with kvconnect.SchedulerConnector(geometry(), instance=instance, token="t") as s:
        # wait_for_workers: the worker that ends it is built by this thread meanwhile.
        waiting = InThread(lambda: s.wait_for_workers(LIMIT_S))
        w = kvconnect.WorkerConnector(geometry(), 0, instance=instance, token="t", port=s.port)
        w.register_kv_caches([torch.zeros((2, 16, 4, 256), dtype=torch.float16)], 16)
        w.register_with_scheduler()
        waiting.outcome()
        with w:
            # bind_connector_metadata: the metadata it waits for is built by this thread.
            waiting = InThread(lambda: w.bind_connector_metadata(1, LIMIT_S))
            s.build_connector_meta(1, [], [], [])
            assert waiting.outcome() == 1
            # update_connector_output(step, timeout): the report it waits for is sent by this
            # thread.
            waiting = InThread(lambda: s.update_connector_output(1, LIMIT_S))
            w.get_finished([])
            w.clear_connector_metadata()
            assert waiting.outcome().through_step == 1


def test_a_call_from_another_thread_while_one_waits_is_a_runtime_error_and_changes_nothing():
    """One thread calls a SchedulerConnector: while a call of it waits with the GIL released
    (here wait_for_workers), another thread's call that would change the binding's request
    entries is refused before it touches anything (a waiting build_connector_meta's step holds
    views of them). The waiting thread keeps the GIL from its handshake until the wait releases
    it: no switch interval forces it out before (sys.setswitchinterval), so the main thread runs
    only once the wait has begun."""
    instance = f"pytest-{os.getpid()}-busy"
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        with kvconnect.SchedulerConnector(geometry(), instance=instance, token="t") as s:
            s.get_num_new_matched_tokens("a", [1, 2], 8, 0)
            waiting = InThread(lambda: s.wait_for_workers(LIMIT_S))
            with pytest.raises(RuntimeError, match="another thread"):
                s.request_finished("a")
            with pytest.raises(RuntimeError, match="another thread"):
                s.get_num_new_matched_tokens("b", [3], 4, 0)
            w = kvconnect.WorkerConnector(geometry(), 0, instance=instance, token="t",
                                          port=s.port)
            w.register_kv_caches([torch.zeros((2, 16, 4, 256), dtype=torch.float16)], 16)
            w.register_with_scheduler()
            waiting.outcome()
            with w:
                assert s.tables()["binding_requests"] == 1  # "a" still, and no "b"
                assert s.request_finished("a") is False  # the wait over: called as usual
                assert s.tables()["binding_requests"] == 0
    finally:
        sys.setswitchinterval(interval)


def test_a_recorded_run_refuses_job_results_from_outside_the_step_channel(tmp_path: Path):
    instance = f"pytest-{os.getpid()}-record"
    config = geometry(record=True, record_dir=str(tmp_path))
    with kvconnect.SchedulerConnector(config, instance=instance, token="t", listen=False) as s:
        s.build_connector_meta(1, [], [], [])
        with pytest.raises(kvconnect.Error) as e:
            s.apply_job_results(1, [(0, "store", True)])
        assert e.value.code == "precondition_failed"
        assert "record" in str(e.value)
    assert list(tmp_path.glob("scheduler-*.kvcrec"))  # the run was recorded
