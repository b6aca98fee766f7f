#!/usr/bin/env python3
"""Debian's real Prometheus server scrapes a running `kvconnect launch`.

Starts `kvconnect launch --engine smoke --set workload.steps=<huge> --set
observe.metrics_port=P` (the default node: a scheduler and two workers, a run that keeps going
until it is stopped), then `prometheus` on loopback with a generated scrape config (100 ms
interval) and a temporary storage directory. It asks Prometheus's HTTP API, once per scrape
interval and at most MAX_QUERIES times, whether the target is up (up == 1) and whether the
launch's completed store jobs are a non-zero series; then it stops Prometheus and the launch with
SIGTERM. The launch must end on the signal with its summary line (`reason` "signal 15", its
segment removed), none of its processes may be left, and no /dev/shm segment of it.

Exit 77 (ctest: skipped) with the reason when the prometheus binary is absent.

usage: prometheus_launch_check.py KVCONNECT_BINARY
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SKIP = 77
SCRAPE_INTERVAL_S = 0.1
MAX_QUERIES = 1200  # 120 s of scrape intervals: generous for a loaded host


def free_port():
    """A port the kernel just handed out on 127.0.0.1 (bound with port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_event(proc, event):
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("event") == event:
            return msg
    raise AssertionError(f"the launch ended before its {event!r} line")


def query(port, promql):
    """The instant vector of `promql` as [(labels, value)], or None while Prometheus cannot
    answer yet."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
    except OSError:
        return None
    if body.get("status") != "success":
        return None
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main():
    binary = sys.argv[1]
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("skipped: no prometheus binary on PATH (Debian: apt-get install prometheus)")
        return SKIP
    metrics_port = free_port()
    prom_port = free_port()
    procs = []
    tmp = tempfile.mkdtemp(prefix="kvc-prometheus-launch-")
    try:
        launch = subprocess.Popen(
            [binary, "launch", "--engine", "smoke", "--set", "workload.steps=100000000",
             "--set", f"observe.metrics_port={metrics_port}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(launch)
        started = read_event(launch, "started")
        pids = [started["scheduler_pid"], *started["worker_pids"]]
        segment = started["segment"].lstrip("/")

        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 100ms\n  scrape_timeout: 100ms\n"
                    "scrape_configs:\n  - job_name: kvconnect\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{metrics_port}']\n")
        prom = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(prom)

        series = 'kvconnect_jobs_completed_total{job="kvconnect",kind="store"}'
        found = None
        for _ in range(MAX_QUERIES):
            up = query(prom_port, 'up{job="kvconnect"}')
            if up and up[0][1] == 1.0:
                found = query(prom_port, series)
                if found and found[0][1] > 0:
                    break
            found = None
            assert launch.poll() is None, "the launch ended while being scraped"
            time.sleep(SCRAPE_INTERVAL_S)  # the next scrape
        assert found, f"no sample of {series} > 0 after {MAX_QUERIES} queries"
        stored = found[0][1]
        # The run goes on: the launch's own /metrics is at least what Prometheus stored.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        direct = [l for l in text.splitlines()
                  if l.startswith('kvconnect_jobs_completed_total{kind="store"} ')]
        assert len(direct) == 1 and float(direct[0].split()[-1]) >= stored, (direct, stored)

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
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
