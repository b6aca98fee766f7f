#!/bin/sh
# `kvconnect soak` with every channel and copy fault kind mixed in: exit 0, a summary that passed
# and a fault report whose invariants hold, each of those kinds fired at least once, and the
# same seeds give the same report twice (the wall-clock fields aside). delay_report comes in both
# forms, by steps and by ms (spec 3, logged as it fires: the ms form fired too). A bad spec and a
# process fault (it needs processes) and fail_io without a file tier are exit 2 with one clear
# line, before any run.
set -eu
bin=$1
refused() {
  want=$1; shift
  if err=$("$bin" soak --steps 5 "$@" 2>&1 >/dev/null); then
    echo "accepted: $*"; exit 1
  else
    code=$?
  fi
  [ "$code" -eq 2 ] || { echo "exit $code for: $*"; exit 1; }
  case $err in *"$want"*) ;; *) echo "no \"$want\" in: $err"; exit 1 ;; esac
}
refused 'did you mean "drop_report"' --fault 'drop_reprot:p=1'
refused 'process faults' --fault 'kill_rank:rank=0,step=3'
refused 'exactly one of by=N' --fault 'delay_report:rank=1,by=2,ms=50,p=0.1'
refused 'fail_io fails file tier jobs, and there is no file tier' --fault 'fail_io:op=read,p=0.1'
refused 'op=both: expected read, write or any' --fault 'fail_io:op=both,p=0.1'
log=$(mktemp /tmp/kvc-soak-faults.XXXXXX)
trap 'rm -f "$log"' EXIT
run() {
  "$bin" soak --steps 200 --seed 5 --fault-seed 9 \
    --fault drop_report:p=0.02 --fault duplicate_report:p=0.02 --fault delay_report:p=0.02,by=2 \
    --fault delay_report:p=0.02,ms=60000 \
    --fault reorder_reports:p=0.02 --fault corrupt_frame:p=0.01 \
    --fault fail_copy:dir=load,p=0.05 --fault fail_copy:dir=store,at=completion,p=0.05 \
    --fault delay_copy:p=0.1 \
    --set runtime.job_timeout_steps=20 --set runtime.job_timeout_ms=0 2>"$log"
}
first=$(run)
grep -q 'fault injected: delay_report .*(fault spec 3)' "$log" ||
  { echo "delay_report by ms (fault spec 3) never fired"; exit 1; }
second=$(run)
python3 - "$first" "$second" <<'PY'
import json, sys
wall = {"wall_seconds", "step_p50_us", "step_p99_us", "connector_share", "connector_ns",
        "copy_share", "load_gbps", "store_gbps"}
def lines(text):
    out = [json.loads(l) for l in text.splitlines()]
    for j in out:
        for k in wall:
            j.pop(k, None)
    return out
a, b = lines(sys.argv[1]), lines(sys.argv[2])
assert [j["event"] for j in a] == ["summary", "fault_report"], a
summary, report = a
assert summary["ok"] is True, summary
assert summary["load_mismatches"] == 0 and summary["loads_verified"] > 0, summary
assert report["invariants_ok"] is True, report
for kind in ["drop_report", "duplicate_report", "delay_report", "reorder_reports",
             "corrupt_frame", "fail_copy", "delay_copy"]:
    assert report["fired"][kind] > 0, (kind, report)
assert report["jobs_failed"] > 0 and report["duplicates_dropped"] > 0, report
assert a == b, ("the same seeds gave different reports", a, b)
print("soak with faults: ok,", json.dumps(report["fired"]))
PY
