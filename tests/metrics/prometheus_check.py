#!/usr/bin/env python3
"""Debian's real Prometheus server scrapes a running kvconnect scheduler.

Starts `kvconnect scheduler --smoke-steps N --serve-after-smoke --metrics-port P` with one
worker process, then `prometheus` on loopback with a generated scrape config (1 s interval) and
a temporary storage directory. Waiting is on events, never on a clock of its own: each time the
scheduler logs that it served a scrape, the test asks Prometheus's HTTP API whether the target
is up (up == 1) and whether a kvconnect series has a non-zero value; it stops at the first scrape
after which both hold (the ctest TIMEOUT bounds the whole). Ends every process it started and
checks that the pool's shm segment is gone.

Exit 77 (ctest: skipped) with the reason when the prometheus binary is absent.

usage: prometheus_check.py KVCONNECT_BINARY
"""
import os
import signal
import subprocess
import sys
import tempfile

from prometheus_support import (SKIP, end_all, free_ports, metrics_sample, prometheus_binary, query,
                                read_event, start_prometheus, wait_for_series, watch_scrapes)


def main():
    binary = sys.argv[1]
    prometheus = prometheus_binary()
    if prometheus is None:
        return SKIP
    instance = f"prom{os.getpid()}"
    token = "prometheus-check"
    common = ["--instance", instance, "--tp-size", "1", "--slots", "8", "--kv-page-bytes", "256",
              "--gpu-blocks", "16", "--block-factor", "2", "--kv-layers", "2", "--token", token]
    metrics_port, prom_port = free_ports(2)
    procs = []
    tmp = tempfile.mkdtemp(prefix="kvc-prometheus-")
    try:
        env = dict(os.environ, SPDLOG_LEVEL="debug")
        sched = subprocess.Popen(
            [binary, "scheduler", *common, "--smoke-steps", "30", "--serve-after-smoke",
             "--metrics-port", str(metrics_port)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(sched)
        scrapes = watch_scrapes(sched.stderr)
        listening = read_event(sched, "listening")
        assert listening["metrics_port"] == metrics_port, listening
        worker = subprocess.Popen(
            [binary, "worker", *common, "--port", str(listening["port"]), "--rank", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(worker)
        smoke = read_event(sched, "smoke")
        assert smoke["jobs_ok"] > 0, smoke

        prom = start_prometheus(prometheus, tmp, metrics_port, prom_port, "1s")
        procs.append(prom)

        series = 'kvconnect_jobs_completed_total{job="kvconnect",kind="store"}'
        stored = wait_for_series(scrapes, prom_port, series)
        # The run is over (only serving now): what Prometheus stored is what /metrics says.
        direct = metrics_sample(metrics_port, 'kvconnect_jobs_completed_total{kind="store"} ')
        assert direct == stored, (direct, stored)
        hist = query(prom_port, 'vllm:kv_offload_store_size_count{job="kvconnect"}')
        assert hist and hist[0][1] == stored, hist

        prom.send_signal(signal.SIGTERM)
        assert prom.wait() == 0
        sched.send_signal(signal.SIGTERM)
        assert sched.wait() == 0
        assert worker.wait() == 0
        leftovers = [f for f in os.listdir("/dev/shm") if instance in f]
        assert not leftovers, leftovers
        print(f"prometheus: up == 1, {series} = {stored:g}")
        return 0
    finally:
        end_all(procs, tmp)


if __name__ == "__main__":
    sys.exit(main())
