#!/usr/bin/env bash
# terse-bench's --device option (scripts/device-check.sh, stage coll-device): a bad value is a
# usage error, host rows say "buffers": "host" with the codec parts of the time, and --device
# cuda either runs (a machine with a GPU: its rows say "buffers": "cuda") or every rank skips
# with a SKIP line and exit 77, never a crash or a hang.
set -uo pipefail
bin=$1/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$bin/terse-bench" allreduce --device gpu >"$work/bad.txt" 2>&1
rc=$?
[ $rc = 2 ] || fail "--device gpu exited $rc, not 2"
grep -q "bad value 'gpu' for --device" "$work/bad.txt" || fail "no usage error: $(cat "$work/bad.txt")"

timeout 60 "$bin/terse-run" -n 2 "$bin/terse-bench" allreduce -b 64K -e 64K -n 1 -w 0 \
  --codec none --codec int8 -J "$work/host.json" >"$work/host.txt" 2>&1 || fail "host run: $(cat "$work/host.txt")"
python3 - "$work/host.json" <<'PY' || exit 1
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 2, rows
for r in rows:
    assert r["buffers"] == "host", r
    assert r["compress_us"] >= 0 and r["reduce_us"] >= 0, r
# int8 compresses: its codec part is measured, not left at zero.
assert rows[1]["compress_us"] > 0, rows[1]
PY

timeout 90 "$bin/terse-run" -n 2 "$bin/terse-bench" allreduce -b 64K -e 64K -n 1 -w 0 \
  --codec int8 --device cuda -J "$work/cuda.json" >"$work/cuda.txt" 2>&1
rc=$?
if [ $rc = 77 ]; then
  [ "$(grep -c 'SKIP: terse-bench allreduce --device cuda' "$work/cuda.txt")" -ge 1 ] ||
    fail "exit 77 without a SKIP line: $(cat "$work/cuda.txt")"
  echo "ok: --device cuda skipped here: $(grep -m1 SKIP "$work/cuda.txt")"
  exit 0
fi
[ $rc = 0 ] || fail "--device cuda exited $rc: $(tail -5 "$work/cuda.txt")"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r and all(x["buffers"]=="cuda" and x["maxrelerr"] < 0.05 for x in r), r' \
  "$work/cuda.json" || fail "cuda rows: $(cat "$work/cuda.json")"
echo "ok: --device cuda ran on the GPU"
