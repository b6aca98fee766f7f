#!/usr/bin/env python3
"""Debian's real Prometheus server scrapes a running `kvconnect launch`.

Starts `kvconnect launch --engine smoke --set workload.steps=<huge> --set
observe.metrics_port=P` (the default node: a scheduler and two workers, a run that keeps going
until it is stopped), then `prometheus` on loopback with a generated scrape config (100 ms
interval) and a temporary storage directory. Each time the launch's scheduler logs that it
served a scrape (runtime.log_level debug), it asks Prometheus's HTTP API whether the target is
up (up == 1) and whether the launch's completed store jobs are a non-zero series; then it stops
Prometheus and the launch with SIGTERM. The launch must end on the signal with its summary line
(`reason` "signal 15", its segment removed), none of its processes may be left, and no /dev/shm
segment of it.

Exit 77 (ctest: skipped) with the reason when the prometheus binary is absent.

usage: prometheus_launch_check.py KVCONNECT_BINARY
"""
import os
import signal
import subprocess
import sys
import tempfile

from prometheus_support import (SKIP, end_all, free_ports, metrics_sample, prometheus_binary,
                                read_event, start_prometheus, wait_for_series, watch_scrapes)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main():
    binary = sys.argv[1]
    prometheus = prometheus_binary()
    if prometheus is None:
        return SKIP
    metrics_port, prom_port = free_ports(2)
    procs = []
    tmp = tempfile.mkdtemp(prefix="kvc-prometheus-launch-")
    try:
        launch = subprocess.Popen(
            [binary, "launch", "--engine", "smoke", "--set", "workload.steps=100000000",
             "--set", f"observe.metrics_port={metrics_port}", "--set", "runtime.log_level=debug"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(launch)
        scrapes = watch_scrapes(launch.stderr)
        started = read_event(launch, "started")
        pids = [started["scheduler_pid"], *started["worker_pids"]]
        segment = started["segment"].lstrip("/")

        prom = start_prometheus(prometheus, tmp, metrics_port, prom_port, "100ms")
        procs.append(prom)

        series = 'kvconnect_jobs_completed_total{job="kvconnect",kind="store"}'
        stored = wait_for_series(scrapes, prom_port, series)
        # The run goes on: the launch's own /metrics is at least what Prometheus stored.
        direct = metrics_sample(metrics_port, 'kvconnect_jobs_completed_total{kind="store"} ')
        assert direct >= stored, (direct, stored)

        prom.send_signal(signal.SIGTERM)
        assert prom.wait() == 0
        launch.send_signal(signal.SIGTERM)
        summary = read_event(launch, "summary")
        code = launch.wait()
        assert summary["reason"] == "signal 15", summary
        assert summary["segment_left"] is False, summary
        assert code == summary["exit_code"] == 128 + signal.SIGTERM, (code, summary)
        left = [p for p in pids if alive(p)]
        assert not left, f"processes left: {left}"
        assert segment not in os.listdir("/dev/shm"), segment
        print(f"prometheus scraped a running launch: up == 1, {series} = {stored:g}")
        return 0
    finally:
        end_all(procs, tmp)


if __name__ == "__main__":
    sys.exit(main())
