#!/usr/bin/env bash
# scripts/sim-validate.py on a hand-made bench-network.sh run: 4 ranks, one 1 Gbit/s run and one
# unshaped run of none and onebit at 16 MiB. The measured times are set from terse-sim's own
# predictions (run here), so the test knows which rows must come out link-bound, which CPU-bound,
# and whether --check must pass or fail.
set -euo pipefail
src=${1:?usage: validate_test.sh SOURCE_DIR TERSE_SIM}
sim=${2:?usage: validate_test.sh SOURCE_DIR TERSE_SIM}
model=$src/sim/models/codecs-cpu-1MiB-2026-11-27b.json
validate=$src/scripts/sim-validate.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

bytes=$((16 << 20))
# What sim-validate.py runs for a row, with the model's compute or without.
predict() { # codec [model args...]
  local codec=$1
  shift
  "$sim" --world 4 --ranks-per-node 1 --nic-per-rank --nic-gbit 0.958 --nic-lat-us 0 \
    --switch-lat-us 0 --bytes $bytes --codec "$codec" --algo flat "$@" | tail -n1 | awk '{ print $5 }'
}
none_model=$(predict none --model "$model" --compute-share 0.25)
none_alone=$(predict none)
onebit_model=$(predict onebit --model "$model" --compute-share 0.25)
onebit_alone=$(predict onebit)
# The classification must use the link alone, not the prediction with compute: onebit's floor
# lies between the two.
awk -v a="$onebit_alone" -v m="$onebit_model" 'BEGIN { exit !(m > 1.5 * a) }' ||
  { echo "FAIL: onebit's compute adds too little ($onebit_alone -> $onebit_model us) for this test"; exit 1; }
# Fixture: none measured 5% above its prediction (an error of -5%), its unshaped floor half the
# link's time (so the link bounds it); onebit's floor midway between its link alone and its
# prediction with compute (CPU-bound), measured 4x its link alone (so the floor stays the
# unshaped time, below the fastest shaped one).
fixture() { # prefix none-measured-factor
  local p=$1 factor=$2
  echo '{"command": "fixture", "git_commit": "test", "date_utc": "today", "ranks": 4, "hosts": 4, "ranks_per_host": 1, "algos": "auto", "codecs": "none onebit"}' >"$p-setup.json"
  {
    echo '{"impl": "terse", "rate_gbit": 1, "size": "16M", "file": "x", "probe_gbit": 0.958, "seconds": 1}'
    echo '{"impl": "terse", "rate_gbit": 0, "size": "16M", "file": "y", "probe_gbit": 20.0, "seconds": 1}'
  } >"$p-runs.jsonl"
  awk -v b=$bytes -v nm="$none_model" -v na="$none_alone" -v oa="$onebit_alone" -v om="$onebit_model" -v f="$factor" 'BEGIN {
    printf "[{\"bytes\": %d, \"codec\": \"none\", \"algorithm\": \"flat\", \"time_us\": %f},\n", b, nm * f
    printf " {\"bytes\": %d, \"codec\": \"onebit:block=2048\", \"algorithm\": \"flat\", \"time_us\": %f},\n", b, oa * 4
    printf " {\"bytes\": %d, \"codec\": \"none\", \"algorithm\": \"flat\", \"time_us\": %f},\n", b, na * 0.5
    printf " {\"bytes\": %d, \"codec\": \"onebit:block=2048\", \"algorithm\": \"flat\", \"time_us\": %f}]\n", b, (oa + om) / 2 }' >"$p-terse.json"
}

fails=0
fail() { echo "FAIL: $*"; fails=1; }

fixture "$dir/good" 1.05
out=$("$validate" --sim "$sim" --measured "$dir/good" --model "$model" --compute-share 0.25 --check) ||
  fail "--check failed on a link-bound row 5% off: $out"
echo "$out"
grep -Eq '^\| 1 Gbit/s .*\| 16 MiB \| none \| flat \|.* -5% \|.*\| link \|$' <<<"$out" ||
  fail "none is not reported link-bound and -5% off"
grep -Eq '^\| 1 Gbit/s .*\| 16 MiB \| onebit \| flat \|.*\| CPU \|$' <<<"$out" || fail "onebit is not reported CPU-bound"
grep -q "^1 of 2 classified rows link-bound; 1 within 20%" <<<"$out" || fail "wrong summary"
# The unshaped run is a floor, not a row to predict.
[[ $(grep -c '^| 1 Gbit/s' <<<"$out") == 2 && $(grep -c '^| 0' <<<"$out" || true) == 0 ]] ||
  fail "the unshaped rows were predicted"

fixture "$dir/bad" 1.5
if out=$("$validate" --sim "$sim" --measured "$dir/bad" --model "$model" --compute-share 0.25 --check); then
  fail "--check passed a link-bound row 33% off"
fi
grep -q "outside: 1 Gbit/s 16 MiB none flat (-33%)" <<<"$out" || fail "the row outside is not named: $out"
# Without --check the same table is only reported.
"$validate" --sim "$sim" --measured "$dir/bad" --model "$model" --compute-share 0.25 >/dev/null ||
  fail "without --check a row outside the tolerance changed the exit status"

# No unshaped run: nothing to classify, and --check refuses rather than passing.
grep -v '"rate_gbit": 0' "$dir/good-runs.jsonl" >"$dir/shaped-runs.jsonl"
cp "$dir/good-setup.json" "$dir/shaped-setup.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); json.dump(r[:2], open(sys.argv[2], "w"))' \
  "$dir/good-terse.json" "$dir/shaped-terse.json"
"$validate" --sim "$sim" --measured "$dir/shaped" --model "$model" | grep -q "no unshaped run measured" ||
  fail "a run without an unshaped link is not said to be unclassified"
set +e
"$validate" --sim "$sim" --measured "$dir/shaped" --model "$model" --check >/dev/null 2>&1
rc=$?
set -e
[[ $rc == 2 ]] || fail "--check without an unshaped run exited $rc, expected 2"

# The floor is the lower of the unshaped time and the fastest shaped one: with onebit's unshaped
# time above everything, its shaped time (just above the link alone) becomes the floor and the
# link bounds it.
fixture "$dir/noisy" 1.05
python3 - "$dir/noisy-terse.json" "$onebit_alone" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
alone = float(sys.argv[2])
rows[1]["time_us"] = alone * 0.99  # shaped onebit: faster than its link alone needs
rows[3]["time_us"] = alone * 50    # unshaped onebit: a slow outlier
json.dump(rows, open(sys.argv[1], "w"))
PY
out=$("$validate" --sim "$sim" --measured "$dir/noisy" --model "$model" --compute-share 0.25) || true
grep -Eq '^\| 1 Gbit/s .*\| 16 MiB \| onebit \| flat \|.*\| link \|$' <<<"$out" ||
  fail "a slow unshaped outlier, not the faster shaped call, set onebit's floor: $out"

# Two ranks per host and a slow node link (--intra-gbps): the prediction uses it, the link alone
# does not (the node's copies are this machine's CPU, which the unshaped run measures). The
# floor sits between the link alone at the default node link and at the slow one, so the row
# is CPU-bound only if the link alone leaves the slow node link out.
p8="$dir/layout"
echo '{"command": "fixture", "git_commit": "test", "date_utc": "today", "ranks": 8, "hosts": 4, "ranks_per_host": 2, "algos": "twolevel", "codecs": "none"}' >"$p8-setup.json"
{
  echo '{"impl": "terse", "rate_gbit": 1, "size": "16M", "file": "x", "probe_gbit": null, "seconds": 1}'
  echo '{"impl": "terse", "rate_gbit": 0, "size": "16M", "file": "y", "probe_gbit": null, "seconds": 1}'
} >"$p8-runs.jsonl"
two() { "$sim" --world 8 --ranks-per-node 2 --nic-gbit 1 --nic-lat-us 0 --switch-lat-us 0 \
  --bytes $bytes --codec none --algo twolevel "$@" | tail -n1 | awk '{ print $5 }'; }
fast=$(two)
slow=$(two --intra-gbps 0.2)
awk -v b=$bytes -v f="$fast" -v s="$slow" 'BEGIN {
  printf "[{\"bytes\": %d, \"codec\": \"none\", \"algorithm\": \"twolevel\", \"time_us\": %f},\n", b, s * 2
  printf " {\"bytes\": %d, \"codec\": \"none\", \"algorithm\": \"twolevel\", \"time_us\": %f}]\n", b, (f + s) / 2 }' >"$p8-terse.json"
out=$("$validate" --sim "$sim" --measured "$p8" --model "$model" --compute-share 0.25 --intra-gbps 0.2) ||
  fail "the two-level fixture failed: $out"
grep -Eq '^\| 1 Gbit/s \(not probed\) \| 16 MiB \| none \| twolevel \|.*\| CPU \|$' <<<"$out" ||
  fail "the link alone took the slow node link (--intra-gbps) into account: $out"

# An unshaped run of other sizes classifies nothing: --check refuses rather than passing.
sed 's/"size": "16M", "file": "y"/"size": "64M", "file": "y"/' "$dir/good-runs.jsonl" >"$dir/other-runs.jsonl"
cp "$dir/good-setup.json" "$dir/other-setup.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r[2]["bytes"]=r[3]["bytes"]=64<<20; json.dump(r, open(sys.argv[2], "w"))' \
  "$dir/good-terse.json" "$dir/other-terse.json"
set +e
out=$("$validate" --sim "$sim" --measured "$dir/other" --model "$model" --check 2>&1)
rc=$?
set -e
[[ $rc == 2 ]] || fail "--check with nothing classified exited $rc, expected 2: $out"
grep -q "not measured unshaped" <<<"$out" || fail "rows without an unshaped measurement are not marked"

((fails == 0)) && echo "sim-validate.py: all checks passed"
exit $fails
