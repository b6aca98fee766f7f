#!/bin/sh
# `kvconnect soak` through the built binary: exit 0, and stdout is exactly one JSON line, the
# summary of a run that passed (the logs go to stderr).
set -eu
bin=$1
out=$("$bin" soak --steps 40 --seed 3 2>/dev/null)
lines=$(printf '%s\n' "$out" | wc -l)
[ "$lines" -eq 1 ] || { echo "stdout has $lines lines:"; printf '%s\n' "$out"; exit 1; }
case $out in
  '{"blocks_loaded":'*'"event":"summary"'*'"ok":true'*) echo "soak cli: ok" ;;
  *) echo "unexpected summary: $out"; exit 1 ;;
esac
