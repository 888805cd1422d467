#!/usr/bin/env bash
# End to end: a tiny sweep of scripts/bench-network.sh (2 emulated hosts, 1 Gbit/s, 4 MiB, codecs
# none, int8 and auto:max=onebit, OpenMPI when built) must produce JSON, Markdown and PNGs whose
# rows match what was asked (auto's rows naming its pick), and leave no namespace behind; then
# 2 hosts x 2 ranks (--ranks-per-host 2, flat and twolevel) must give terse 2 nodes of 2 ranks and
# a row per codec and algorithm; then a run interrupted with Ctrl-C (SIGINT) mid-benchmark must
# fail and leave none behind either.
# Skips (77) when this machine cannot emulate links.
set -euo pipefail
src=${1:?usage: e2e_test.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: e2e_test.sh SOURCE_DIR BUILD_DIR}
export TERSE_BUILD_DIR=$build  # where bench-network.sh finds terse-bench (every script's convention)

[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root to create network namespaces"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null || { echo "SKIP: iproute2 (ip, tc) not installed"; exit 77; }
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || { echo "SKIP: /usr/bin/python3 has no matplotlib"; exit 77; }
"$build/bin/terse-bench" --help 2>&1 | grep -qw allreduce ||
  { echo "SKIP: $build/bin/terse-bench has no allreduce subcommand (API layer not built)"; exit 77; }

# A prefix of our own, so a benchmark someone is running meanwhile is neither refused nor touched.
prefix="terse-t$$"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpi=--no-mpi
[[ -x $build/bin/mpi-allreduce-bench ]] && command -v mpirun >/dev/null && mpi=""

set +e
UCX_LOG_LEVEL=warn bash "$src/scripts/bench-network.sh" --ranks 2 --rates "1 unshaped" --sizes 4M --codecs "none int8 auto:max=onebit" \
  --iters 3 --warmup 1 --timeout 50 --prefix "$prefix" --out "$out" $mpi
rc=$?
set -e
left=$(ip netns list | awk '{print $1}' | grep "^$prefix-" || true)
if [[ -n $left ]]; then
  echo "FAIL: namespaces left after the run: $left"
  for ns in $left; do ip netns del "$ns" || true; done
  exit 1
fi
[[ $rc -ne 77 ]] || { echo "SKIP: bench-network.sh says this machine cannot emulate links"; exit 77; }
[[ $rc -eq 0 ]] || { echo "FAIL: bench-network.sh exited with $rc"; exit 1; }

fails=0
for f in results.json results.md busbw.png speedup.png raw/terse-1gbit-4M.json raw/terse-unshaped-4M.json; do
  [[ -s $out/$f ]] || { echo "FAIL: $f missing"; fails=1; }
done
expect_mpi=0
[[ -z $mpi ]] && expect_mpi=1
/usr/bin/python3 - "$out/results.json" "$expect_mpi" <<'PY' || fails=1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
want = {"none", "int8", "auto"} | ({"OpenMPI"} if sys.argv[2] == "1" else set())
got = {r["codec"] for r in rows}
assert got == want, f"codecs {got}, expected {want}"
assert {r["rate_gbit"] for r in rows} == {1.0, 0.0}, "expected a 1 Gbit/s and an unshaped run"
for r in rows:
    assert r["bytes"] == 4 << 20 and r["rate_gbit"] in (1.0, 0.0) and r["ranks"] == 2, r
    assert r["time_us"] > 0 and r["busbw_gbs"] > 0, r
    # 4 MiB over a 1 Gbit/s link cannot beat the line rate uncompressed (the 256 KiB tbf bucket
    # allows at most ~7% more): a much faster result would
    # mean the traffic did not cross the shaped link.
    if r["codec"] in ("none", "OpenMPI") and r["rate_gbit"] == 1.0:
        assert r["busbw_gbs"] < 0.125 * 1.2, f"uncompressed busbw {r['busbw_gbs']} GB/s above 1 Gbit/s: shaping bypassed?"
    # --rates unshaped removes the 1 Gbit/s run's tbf: a veth between namespaces carries
    # gigabytes a second, so terse's none at the old limit would mean the shaping stayed
    # (OpenMPI's TCP is slower than the limit even unshaped here: 28 ms for 4 MiB, 2026-11-27).
    if r["codec"] == "none" and r["rate_gbit"] == 0.0:
        assert r["busbw_gbs"] > 0.125 * 1.5, f"unshaped busbw {r['busbw_gbs']} GB/s: the 1 Gbit/s tbf left in place?"
    if r["codec"] == "none":
        assert r["maxrelerr"] < 1e-5, r
    if r["codec"] == "auto":
        # What auto ran the call with: one of the codecs auto:max=onebit allows (every codec:
        # the low-bit ones sit between int8 and onebit, compressors/src/auto_spec.cc).
        assert r.get("chosen", "").split(":")[0] in ("none", "fp16", "bf16", "int8", "fp8",
            "mxfp8", "mxfp4", "int4", "onebit", "topk"), r
PY
grep -q '| 1 | 4M | int8 |' "$out/results.md" || { echo "FAIL: no int8 row in results.md"; fails=1; }
grep -q '| unshaped | 4M | int8 |' "$out/results.md" || { echo "FAIL: no unshaped int8 row in results.md"; fails=1; }
# The UCX_* variables the ranks ran with (UCX's default log level, set here) are on record.
/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["environment"].get("UCX_LOG_LEVEL") == "warn", d.get("environment"); assert d["rates_gbit"] == [1, 0], d["rates_gbit"]' \
  "$out/setup.json" || { echo "FAIL: setup.json lacks the caller's UCX_* environment or the rates"; fails=1; }
grep -q '| 1 | 4M | auto (picked [a-z0-9]*) |' "$out/results.md" ||
  { echo "FAIL: no auto row naming its pick in results.md"; fails=1; }

# Two ranks per emulated host, both algorithms, OpenMPI with two slots per host when built; the
# ranks of a host over TCP on its loopback, then over shared memory (--node-link shm), while the
# hosts keep their shaped links either way.
out3=""
trap 'rm -rf "$out" "$out3"' EXIT
for link in tcp shm; do
out3=$(mktemp -d)
set +e
bash "$src/scripts/bench-network.sh" --ranks 2 --ranks-per-host 2 --algos "flat twolevel" --rates 1 \
  --node-link "$link" --sizes 4M --codecs "none int8" --iters 2 --warmup 1 --timeout 50 --no-probe --prefix "$prefix" \
  --out "$out3" $mpi
rc3=$?
set -e
left=$(ip netns list | awk '{print $1}' | grep "^$prefix-" || true)
[[ -z $left ]] || { echo "FAIL: namespaces left after the 2x2 $link run: $left"; for ns in $left; do ip netns del "$ns" || true; done; fails=1; }
if [[ $rc3 -ne 0 ]]; then
  echo "FAIL: bench-network.sh --ranks-per-host 2 --node-link $link exited with $rc3"
  fails=1
else
  # TERSE_NODE per host namespace: terse must see the hosts as nodes.
  grep -q '^# nodes: 2 nodes x 2 ranks; two-level: available' "$out3/logs/terse-1gbit-4M-rank0.log" ||
    { echo "FAIL: terse did not see 2 nodes of 2 ranks:"; head -3 "$out3/logs/terse-1gbit-4M-rank0.log"; fails=1; }
  # The transport's own report (terse-bench's header): shared memory inside a host only when asked.
  if [[ $link == shm ]]; then
    grep -q '^# terse-bench allreduce: 4 ranks over ucx(.*node: .*shared memory' "$out3/logs/terse-1gbit-4M-rank0.log" ||
      { echo "FAIL: --node-link shm, but terse reports no shared memory:"; head -1 "$out3/logs/terse-1gbit-4M-rank0.log"; fails=1; }
  elif grep -q 'shared memory' "$out3/logs/terse-1gbit-4M-rank0.log"; then
    echo "FAIL: --node-link tcp, but terse reports shared memory"; fails=1
  fi
  [[ -s $out3/algo-speedup.png ]] || { echo "FAIL: algo-speedup.png missing (2x2 run)"; fails=1; }
  grep -q 'twolevel speedup over flat' "$out3/results.md" || { echo "FAIL: no side-by-side table in results.md"; fails=1; }
  /usr/bin/python3 - "$out3/results.json" "$expect_mpi" <<'PY' || fails=1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
terse = {(r["codec"], r["algorithm"]) for r in rows if r["impl"] == "terse"}
want = {(c, a) for c in ("none", "int8") for a in ("flat", "twolevel")}
assert terse == want, f"terse rows {terse}, expected {want}"
assert sum(r["impl"] == "openmpi" for r in rows) == (1 if sys.argv[2] == "1" else 0), rows
for r in rows:
    assert r["ranks"] == 4 and r["time_us"] > 0, r
    if r["impl"] == "terse" and r["codec"] == "none":
        assert r["maxrelerr"] < 1e-5, r
    # Flat none is a ring that crosses each host boundary once per rank pair: 1.5 x 4 MiB per
    # host at 1 Gbit/s, so its busbw cannot beat the line rate unless the shaping was bypassed.
    if r["impl"] == "terse" and r["codec"] == "none" and r["algorithm"] == "flat":
        assert r["busbw_gbs"] < 0.125 * 1.2, f"flat none busbw {r['busbw_gbs']} GB/s: shaping bypassed?"
    if r["impl"] == "terse" and r["algorithm"] == "twolevel":
        assert r["speedup_vs_flat"] is not None and r["speedup_vs_flat"] > 0, r
PY
fi
rm -rf "$out3"
done

# Ctrl-C in the middle of a run: bench-network.sh must stop its ranks, remove every namespace it
# made and exit non-zero. Job control (set -m) starts it in a process group of its own to
# signal, as a terminal would (without it bash starts background jobs with SIGINT ignored, and
# an ignored signal cannot be trapped); the benchmark is long enough (many calls at 1 Gbit/s) to
# be caught mid-run.
out2=$(mktemp -d)
trap 'rm -rf "$out" "$out2" "$out3"' EXIT
set -m
bash "$src/scripts/bench-network.sh" --ranks 2 --rates 1 --sizes 16M --codecs none \
  --iters 200 --warmup 1 --timeout 120 --prefix "$prefix" --out "$out2" \
  --no-mpi --no-probe --no-plot >"$out2/log" 2>&1 &
pid=$!
set +m
for _ in $(seq 1 300); do  # until the ranks run (their logs appear), at most 30 s
  compgen -G "$out2/logs/*" >/dev/null && break
  sleep 0.1
done
sleep 1
if ! kill -0 "$pid" 2>/dev/null; then
  echo "FAIL: the run to interrupt ended early:"; tail -20 "$out2/log"; fails=1
else
  kill -INT -- "-$pid"
  set +e
  timeout 60 tail --pid="$pid" -f /dev/null
  wait "$pid"
  rc2=$?
  set -e
  [[ $rc2 -ne 0 ]] || { echo "FAIL: an interrupted run exited 0"; fails=1; }
  echo "interrupted run: exit status $rc2; $(grep -c 'interrupted, tearing down' "$out2/log") teardown message"
  left=$(ip netns list | awk '{print $1}' | grep "^$prefix-" || true)
  if [[ -n $left ]]; then
    echo "FAIL: namespaces left after Ctrl-C: $left"; tail -20 "$out2/log"
    for ns in $left; do ip netns del "$ns" || true; done
    fails=1
  fi
fi
((fails == 0)) && echo "bench-network end to end: all checks passed"
exit $fails
