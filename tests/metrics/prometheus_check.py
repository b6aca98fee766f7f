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
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.parse
import urllib.request

SKIP = 77


def free_port():
    """A port the kernel just handed out on 127.0.0.1 (bound with port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_json_line(proc, event):
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("event") == event:
            return msg
    raise AssertionError(f"the scheduler ended before its {event!r} line")


def query(port, promql):
    """The instant vector of `promql` as [(labels, value)], or None while Prometheus cannot
    answer yet."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url) as r:
            body = json.load(r)
    except OSError:
        return None
    if body.get("status") != "success":
        return None
    return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]


def main():
    binary = sys.argv[1]
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        print("skipped: no prometheus binary on PATH (Debian: apt-get install prometheus)")
        return SKIP
    instance = f"prom{os.getpid()}"
    token = "prometheus-check"
    common = ["--instance", instance, "--tp-size", "1", "--slots", "8", "--kv-page-bytes", "256",
              "--gpu-blocks", "16", "--block-factor", "2", "--kv-layers", "2", "--token", token]
    metrics_port = free_port()
    prom_port = free_port()
    procs = []
    tmp = tempfile.mkdtemp(prefix="kvc-prometheus-")
    try:
        env = dict(os.environ, SPDLOG_LEVEL="debug")
        sched = subprocess.Popen(
            [binary, "scheduler", *common, "--smoke-steps", "30", "--serve-after-smoke",
             "--metrics-port", str(metrics_port)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(sched)
        scrapes = queue.Queue()

        def watch_stderr():
            for line in sched.stderr:
                if "metrics: scrape" in line:
                    scrapes.put(line)
            scrapes.put(None)  # the scheduler ended

        threading.Thread(target=watch_stderr, daemon=True).start()
        listening = read_json_line(sched, "listening")
        assert listening["metrics_port"] == metrics_port, listening
        worker = subprocess.Popen(
            [binary, "worker", *common, "--port", str(listening["port"]), "--rank", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(worker)
        smoke = read_json_line(sched, "smoke")
        assert smoke["jobs_ok"] > 0, smoke

        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: kvconnect\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{metrics_port}']\n")
        prom = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(prom)

        series = 'kvconnect_jobs_completed_total{job="kvconnect",kind="store"}'
        while True:
            line = scrapes.get()  # the next scrape the scheduler served
            assert line is not None, "the scheduler ended"
            up = query(prom_port, 'up{job="kvconnect"}')
            if not up or up[0][1] != 1.0:
                continue
            found = query(prom_port, series)
            if found and found[0][1] > 0:
                break
        stored = found[0][1]
        # The run is over (only serving now): what Prometheus stored is what /metrics says.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
            text = r.read().decode()
        direct = [l for l in text.splitlines()
                  if l.startswith('kvconnect_jobs_completed_total{kind="store"} ')]
        assert len(direct) == 1 and float(direct[0].split()[-1]) == stored, (direct, stored)
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
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
