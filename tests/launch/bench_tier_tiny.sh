#!/bin/sh
# bench tier end to end, tiny and untimed: two block sizes, both engines, two rounds; expects one
# JSON line per size, engine and direction, and no scratch directory left behind; then once with
# --fill-first (the working set written before the timed writes, which then all recycle). Skips (77)
# without fio or where io_uring is refused (fio's io_uring engine needs it).
set -u
kvconnect=$1
command -v fio >/dev/null 2>&1 || { echo "fio not installed: skipped"; exit 77; }
root=$(mktemp -d /tmp/kvc-bench-tier-test-XXXXXX) || exit 1
trap 'rm -rf "$root"' EXIT
out=$("$kvconnect" bench tier --root-dir "$root" --block-bytes 65536,262144 --seconds 0.2 \
  --rounds 2 --working-set-mib 8 --engines io_uring,threads --json 2>"$root.err")
rc=$?
err=$(cat "$root.err"); rm -f "$root.err"
echo "$out"
if [ $rc -ne 0 ]; then
  echo "$err"
  case "$err" in *io_uring*) echo "io_uring refused here: skipped"; exit 77;; esac
  exit 1
fi
[ "$(echo "$out" | grep -c '"bench":"tier"')" -eq 8 ] || { echo "expected 8 JSON lines"; exit 1; }
echo "$out" | grep -q '"block_bytes":262144,.*"engine":"threads"' || exit 1
[ -z "$(ls -A "$root")" ] || { echo "left behind:"; ls -A "$root"; exit 1; }
fill=$("$kvconnect" bench tier --root-dir "$root" --block-bytes 65536 --seconds 0.2 --rounds 1 \
  --working-set-mib 2 --engines io_uring,threads --fill-first --json) || exit 1
echo "$fill"
[ "$(echo "$fill" | grep -c '"fill_first":true')" -eq 4 ] || { echo "expected 4 lines"; exit 1; }
[ -z "$(ls -A "$root")" ] || { echo "left behind:"; ls -A "$root"; exit 1; }
