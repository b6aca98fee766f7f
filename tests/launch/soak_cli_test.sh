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
# Faults that need processes are refused with exit 2 and one line saying why.
for spec in kill_rank:rank=0,step=3 lose_device:rank=0,nth=1; do
  set +e
  err=$("$bin" soak --steps 5 --fault "$spec" 2>&1 >/dev/null)
  code=$?
  set -e
  [ "$code" -eq 2 ] || { echo "soak --fault $spec: exit $code, expected 2: $err"; exit 1; }
  case $err in
    *"use kvconnect launch"*) echo "soak cli: $spec refused" ;;
    *) echo "soak --fault $spec: unexpected message: $err"; exit 1 ;;
  esac
done
