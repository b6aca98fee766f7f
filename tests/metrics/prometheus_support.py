"""What the Prometheus checks share: ports, the JSON lines of a kvconnect process, Debian's
real `prometheus` started on loopback with a generated scrape config, and the wait for a
series, driven by the scrapes the scheduler logs ("metrics: scrape N served", log level debug),
never by a clock of its own (the ctest TIMEOUT bounds the whole).
"""
import json
import os
import queue
import shutil
import socket
import subprocess
import threading
import urllib.parse
import urllib.request

SKIP = 77


def prometheus_binary():
    """The prometheus binary, or None (the check then exits SKIP with the reason)."""
    path = shutil.which("prometheus")
    if path is None:
        print("skipped: no prometheus binary on PATH (Debian: apt-get install prometheus)")
    return path


def free_ports(count):
    """`count` distinct ports the kernel just handed out on 127.0.0.1 (bound with port 0, all at
    once so none repeats, then released)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def read_event(proc, event):
    """The next JSON line of `proc`'s stdout whose "event" is `event`."""
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("event") == event:
            return msg
    raise AssertionError(f"the process ended before its {event!r} line")


def watch_scrapes(stream):
    """A queue that gets each "metrics: scrape" log line of `stream` (read on a thread) and None
    once the stream ends."""
    scrapes = queue.Queue()

    def watch():
        for line in stream:
            if "metrics: scrape" in line:
                scrapes.put(line)
        scrapes.put(None)

    threading.Thread(target=watch, daemon=True).start()
    return scrapes


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


def start_prometheus(binary, tmp, target_port, prom_port, interval):
    """Prometheus on 127.0.0.1:`prom_port` scraping 127.0.0.1:`target_port` every `interval`
    ("100ms", "1s"), its storage under `tmp`."""
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w") as f:
        f.write(f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n"
                "scrape_configs:\n  - job_name: kvconnect\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{target_port}']\n")
    return subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_series(scrapes, prom_port, series):
    """After each scrape the target served, asks Prometheus whether the target is up and
    `series` has a sample > 0; returns that sample's value. Fails when the target's log ends."""
    while True:
        line = scrapes.get()  # the next scrape the scheduler served
        assert line is not None, "the scraped process ended"
        up = query(prom_port, 'up{job="kvconnect"}')
        if not up or up[0][1] != 1.0:
            continue
        found = query(prom_port, series)
        if found and found[0][1] > 0:
            return found[0][1]


def metrics_sample(port, prefix):
    """The value of the one line of the target's own /metrics starting with `prefix`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    lines = [l for l in text.splitlines() if l.startswith(prefix)]
    assert len(lines) == 1, (prefix, lines)
    return float(lines[0].split()[-1])


def end_all(procs, tmp):
    """Kills and reaps every process still running and removes the temporary directory (the
    checks' `finally`: nothing they started outlives them)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
