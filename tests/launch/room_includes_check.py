#!/usr/bin/env python3
"""launch/'s rooms and which of them each may include (docs/architecture.md, "launch/'s rooms").

Every source file under launch/ sits in a room; a room includes only its own files and those of
the rooms below it, so the dependencies point one way; no room holds more than ROOM_LINE_LIMIT
lines; and the layers below launch/ (proto, shm, cuda, disk, actors) include nothing of launch/.
Prints one line per broken rule and exits 1, or exits 0.

  room_includes_check.py SOURCE_DIR   checks the tree at SOURCE_DIR
  room_includes_check.py --self-test  checks the checker on made-up trees (each rule must fire)
"""
import os
import re
import sys
import tempfile

# room -> the rooms its files may include besides their own.
ALLOWED = {
    "config": set(),
    "roles": {"config"},
    "process": set(),
    "supervisor": {"config", "roles", "process"},
    "engines/smoke": {"config"},
    "engines/sim": {"config"},
    "engines/example": set(),
    "engines": {"config", "roles", "process", "engines/smoke", "engines/sim"},
    "bench": {"process"},
    "replay": set(),
    "trace": set(),
    "cli": {"config", "roles", "process", "supervisor", "engines", "engines/smoke", "engines/sim",
            "bench", "replay", "trace"},
}
BELOW_LAUNCH = ["proto", "shm", "cuda", "disk", "actors"]
ROOM_LINE_LIMIT = 3000
SOURCE = re.compile(r"\.(cpp|hpp|cu|h)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"launch/([^"]+)"', re.M)


def room_of(rel):
    """The room of a path under launch/ ("engines/sim/x.hpp" -> "engines/sim"), or None."""
    parts = rel.split("/")
    if parts[0] == "engines" and len(parts) > 2:  # "engines/x.hpp": the seam, room "engines"
        name = "engines/" + parts[1]
    elif len(parts) > 1:
        name = parts[0]
    else:
        return None
    return name if name in ALLOWED else None


def sources(root):
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if SOURCE.search(f):
                yield os.path.join(dirpath, f)


def check(source_dir):
    problems = []
    launch = os.path.join(source_dir, "launch")
    lines = {room: 0 for room in ALLOWED}
    for path in sources(launch):
        rel = os.path.relpath(path, launch)
        room = room_of(rel)
        if room is None:
            problems.append(f"launch/{rel}: not in a room ({', '.join(sorted(ALLOWED))})")
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines[room] += text.count("\n")
        for target in INCLUDE.findall(text):
            to = room_of(target)
            if to is None:
                problems.append(f"launch/{rel}: includes launch/{target}, which is in no room")
            elif to != room and to not in ALLOWED[room]:
                problems.append(f"launch/{rel}: room {room} includes launch/{target} (room {to}); "
                                f"{room} may include: {', '.join(sorted(ALLOWED[room])) or 'none'}")
    for room, n in sorted(lines.items()):
        if n > ROOM_LINE_LIMIT:
            problems.append(f"launch/{room}: {n} lines, over {ROOM_LINE_LIMIT}: split it by duty")
    for below in BELOW_LAUNCH:
        for path in sources(os.path.join(source_dir, below)):
            with open(path, encoding="utf-8") as f:
                for target in INCLUDE.findall(f.read()):
                    problems.append(f"{os.path.relpath(path, source_dir)}: includes "
                                    f"launch/{target}; {below}/ sits below launch/")
    return problems


def self_test():
    with tempfile.TemporaryDirectory(prefix="room_includes_") as base:
        return self_test_in(base)


def self_test_in(base):
    def tree(files):
        d = tempfile.mkdtemp(dir=base)
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w", encoding="utf-8") as f:
                f.write(text)
        return d

    ok = {"launch/config/a.hpp": "#pragma once\n",
          "launch/roles/b.hpp": '#include "launch/config/a.hpp"\n',
          "launch/cli/c.cpp": '#include "launch/roles/b.hpp"\n'}
    cases = [
        ({}, None),
        ({"launch/config/a.hpp": '#include "launch/supervisor/x.hpp"\n'}, "room config includes"),
        ({"launch/supervisor/x.cpp": '#include "launch/engines/sim/y.hpp"\n'},
         "room supervisor includes"),
        ({"launch/engines/sim/s.cpp": '#include "launch/engines/engine.hpp"\n'},
         "room engines/sim includes"),
        ({"launch/flat.cpp": "\n"}, "not in a room"),
        ({"launch/config/z.cpp": '#include "launch/flat.hpp"\n'}, "which is in no room"),
        ({"launch/trace/big.cpp": "\n" * (ROOM_LINE_LIMIT + 1)}, "over"),
        ({"actors/embed/e.hpp": '#include "launch/config/a.hpp"\n'}, "sits below launch/"),
    ]
    failed = 0
    for extra, want in cases:
        got = check(tree({**ok, **extra}))
        good = (not got) if want is None else any(want in p for p in got)
        if not good:
            failed += 1
            print(f"self-test: {sorted(extra) or 'clean tree'}: wanted {want!r}, got {got}")
    return failed


def main():
    if sys.argv[1:] == ["--self-test"]:
        return 1 if self_test() else 0
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
