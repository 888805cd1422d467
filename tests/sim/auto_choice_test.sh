#!/usr/bin/env bash
# terse-sim --algo auto picks the faster of flat and two-level by timing both on the simulated
# clock (CollectiveEngine::chooseAlgorithm): on 2 nodes of 8 ranks at 25, 100 and 400 Gbit/s,
# 64 MiB, with none and onebit (onebit flips: two-level at 25 Gbit/s, flat at 400), auto's time
# must be the faster algorithm's and its "# auto chose" line must name that algorithm. The times
# are simulated, so they are deterministic: no host timing is asserted.
set -euo pipefail
sim=${1:?usage: auto_choice_test.sh TERSE_SIM}
fails=0
timeOf() { awk '$1 == 67108864 { print $5 }'; }
for gbit in 25 100 400; do
  for codec in none onebit; do
    run() { "$sim" --world 16 --ranks-per-node 8 --nic-gbit "$gbit" --bytes 64M --codec "$codec" --algo "$1"; }
    flat=$(run flat | timeOf)
    two=$(run twolevel | timeOf)
    # Two-level's allreduce pipelines 64 MiB (TERSE_TWOLEVEL_SEGMENT_BYTES): auto also times it
    # in one segment, and takes that where it is faster.
    whole=$(TERSE_TWOLEVEL_SEGMENT_BYTES=1099511627776 run twolevel | timeOf)
    two=$(awk -v t="$two" -v w="$whole" 'BEGIN { print (w < t ? w : t) }')
    out=$(run auto)
    auto=$(echo "$out" | timeOf)
    chose=$(echo "$out" | sed -n 's/^# auto chose \([a-z]*\) .*/\1/p')
    want=$(awk -v f="$flat" -v t="$two" 'BEGIN { print (t < f ? "twolevel" : "flat") }')
    best=$(awk -v f="$flat" -v t="$two" 'BEGIN { print (t < f ? t : f) }')
    echo "$gbit Gbit/s $codec: flat $flat us, twolevel $two us (one segment $whole us), auto $auto us ($chose)"
    [[ $chose == "$want" ]] || { echo "FAIL: auto chose '$chose', the faster is $want"; fails=1; }
    # The same algorithm on a warmed-up simulation: within 2% of its own first call.
    awk -v a="$auto" -v b="$best" 'BEGIN { exit !(a > 0 && a <= 1.02 * b && a >= 0.98 * b) }' ||
      { echo "FAIL: auto's $auto us is not the faster algorithm's $best us"; fails=1; }
  done
done
[[ $fails -eq 0 ]] && echo PASS
exit $fails
