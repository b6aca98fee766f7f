#!/usr/bin/env python3
"""Bad input to `kvconnect replay`: every bad line gets one error line and the replay goes on.

Usage: replay_input_check.py KVCONNECT. Checks an invalid UTF-8 byte, a line above the 1 MiB
limit (its error does not echo it), a directory given as the file, and that the good lines
after the bad ones are still answered. Exit 0 when every check holds.
"""
import json
import subprocess
import sys
import tempfile

kvc = sys.argv[1]
config = b'{"op":"config","capacity":4,"policy":"lru"}\n'
failures = []


def replay(data, *args):
    p = subprocess.run([kvc, "replay", *args], input=data, capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "strict").splitlines(), p.stderr


def check(cond, what):
    if not cond:
        failures.append(what)


rc, lines, _ = replay(b"\xff\n" + config)
check(rc == 1, f"invalid UTF-8: exit {rc}, want 1")
check(len(lines) == 2 and "error" in json.loads(lines[0]), f"invalid UTF-8: {lines[:2]}")
check(len(lines) == 2 and json.loads(lines[1]) == {"ok": True}, "the next line is answered")

rc, lines, _ = replay(b"[" * (3 << 20) + b"\n" + config)
check(rc == 1, f"long line: exit {rc}, want 1")
check(len(lines) == 2 and "longer than" in json.loads(lines[0])["error"], f"long line: {lines[:1]}")
check(all(len(l) < 1000 for l in lines), "an error line echoes the long input")
check(len(lines) == 2 and json.loads(lines[1]) == {"ok": True}, "the line after is answered")

rc, lines, _ = replay(b'{"op":"config","capacity":4,"policy":"lru","store_threshold":5000000000}\n')
check(rc == 1 and "at most 4294967295" in json.loads(lines[0])["error"], f"clamped: {lines}")

with tempfile.TemporaryDirectory() as d:
    rc, lines, _ = replay(b"", d)
    check(rc == 1, f"a directory: exit {rc}, want 1")
    check(len(lines) == 1 and "Is a directory" in json.loads(lines[0])["error"], f"{lines}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("replay input checks: ok")
