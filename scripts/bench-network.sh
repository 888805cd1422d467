#!/usr/bin/env bash
# Benchmarks terse's allreduce and OpenMPI's MPI_Allreduce on emulated network links.
#
# As root, builds N emulated hosts (one network namespace per host, K ranks in each) joined by
# veth pairs to a bridge that lives in its own namespace, shapes both directions of every link
# with tc tbf to each requested rate, runs `terse-bench allreduce` (every codec, each requested
# algorithm) and `mpi-allreduce-bench` (OpenMPI, TCP) across them, and writes JSON, a Markdown
# table and PNG plots. Ranks of one host talk inside its namespace (loopback, unshaped: a node's
# fast link); ranks of different hosts over the shaped links. Everything it creates is removed
# on exit, on failure and on Ctrl-C. Addresses exist only on interfaces inside the namespaces
# this script created, so no benchmark traffic can leave them.
#
# Exit status: 0 done, 1 a run failed, 2 bad arguments, 77 this machine cannot emulate links
# (not root, no network namespaces, no veth/bridge, no tc tbf) or a previous run's namespaces
# are still there.
set -euo pipefail

kSkip=77
orig_args=("$@")
root_dir=$(cd "$(dirname "$0")/.." && pwd)
. "$root_dir/scripts/lib/netns.sh"

usage() {
  cat <<EOF
Usage: sudo $0 [options]

  --ranks N          emulated hosts (default 4); --hosts N is the same option
  --ranks-per-host K ranks in each host's namespace (default 1), K*N ranks in all; each rank's
                     TERSE_NODE is its host, so terse sees N nodes of K ranks
  --node-link L      what carries the traffic between ranks of one host: tcp (default; TCP over
                     the namespace's loopback) or shm (shared memory: terse picks it for ranks
                     of one node by itself, OpenMPI adds its vader BTL); hosts always talk TCP
                     over their shaped links. shm needs --ranks-per-host 2 or more
  --algos "A ..."    allreduce algorithms, each timed with every codec: auto, flat, twolevel
                     (default "auto": measured choice when K > 1, else flat); e.g. "flat twolevel auto"
  --rates "R ..."    link rates in Gbit/s (default "1 10 25"); "unshaped" runs the same hosts
                     with no tc limit (recorded as rate 0): the call's time when the link is as
                     fast as this machine's CPUs make a veth, i.e. the floor that everything but
                     the link sets (scripts/sim-validate.py uses it to tell link-bound rows)
  --sizes "S ..."    message sizes, K/M/G suffixes allowed (default "64M"; e.g. "1M 4M 16M 64M")
  --codecs "C ..."   terse codec specs (default "all auto": the ten codecs and auto; e.g.
                     "none int8 topk:ratio=0.001 auto:max=onebit")
  --iters N          timed iterations per size (default 10)
  --warmup N         warm-up iterations per size (default 3)
  --out DIR          results directory (default bench-results/network-<UTC date>)
  --timeout S        limit for one run of one implementation at one rate and size (default 900)
  --no-mpi           skip OpenMPI
  --no-terse         skip terse (OpenMPI only)
  --no-probe         skip the raw TCP throughput probe of each shaped link
  --no-plot          write JSON only
  --sequential       time one codec after the other (default: call by call in turn, so a
                     machine load that drifts during the run weighs on every codec alike)
  --probe-only       build the hosts, shape each rate and measure one TCP stream; no benchmarks
  --keep             leave namespaces up at the end (debugging); remove them later with --clean
  --clean            remove namespaces a previous run left behind (then continue)
  --prefix P         namespace name prefix (default terse: terse-h1..terse-hN, terse-br)
  -h, --help         this text

terse-bench and mpi-allreduce-bench are taken from \$TERSE_BUILD_DIR/bin (default build, relative
to the repository), the build directory of every script.
EOF
}

ranks=4 # hosts; the name predates --ranks-per-host
ranks_per_host=1
node_link=tcp
algos="auto"
rates="1 10 25"
sizes="64M"
codecs="all auto"
iters=10
warmup=3
out_dir=""
run_timeout=900
do_mpi=auto
do_terse=1
do_probe=1
do_plot=1
probe_only=0
keep=0
clean=0
prefix=terse
build_dir=${TERSE_BUILD_DIR:-build}
interleave=1

die_usage() {
  echo "bench-network: $*" >&2
  echo "Run with --help for the options." >&2
  exit 2
}

need_arg() {
  [[ $# -ge 2 ]] || die_usage "option $1 needs a value"
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks | --hosts) need_arg "$@"; ranks=$2; shift 2 ;;
    --ranks-per-host) need_arg "$@"; ranks_per_host=$2; shift 2 ;;
    --algos) need_arg "$@"; algos=$2; shift 2 ;;
    --node-link) need_arg "$@"; node_link=$2; shift 2 ;;
    --rates) need_arg "$@"; rates=$2; shift 2 ;;
    --sizes) need_arg "$@"; sizes=$2; shift 2 ;;
    --codecs) need_arg "$@"; codecs=$2; shift 2 ;;
    --iters) need_arg "$@"; iters=$2; shift 2 ;;
    --warmup) need_arg "$@"; warmup=$2; shift 2 ;;
    --out) need_arg "$@"; out_dir=$2; shift 2 ;;
    --timeout) need_arg "$@"; run_timeout=$2; shift 2 ;;
    --prefix) need_arg "$@"; prefix=$2; shift 2 ;;
    --build-dir) die_usage "--build-dir is gone: set TERSE_BUILD_DIR=D instead (the build directory of every script)" ;;
    --no-mpi) do_mpi=0; shift ;;
    --no-terse) do_terse=0; shift ;;
    --no-probe) do_probe=0; shift ;;
    --no-plot) do_plot=0; shift ;;
    --sequential) interleave=0; shift ;;
    --probe-only) probe_only=1; shift ;;
    --keep) keep=1; shift ;;
    --clean) clean=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die_usage "unknown option '$1'" ;;
  esac
done

# ---- argument checks (before touching anything) ----------------------------------------------
[[ $ranks =~ ^[0-9]+$ ]] && ((ranks >= 2 && ranks <= 64)) ||
  die_usage "--ranks must be a whole number from 2 to 64, got '$ranks'"
[[ $ranks_per_host =~ ^[0-9]+$ ]] && ((ranks_per_host >= 1 && ranks_per_host <= 16)) ||
  die_usage "--ranks-per-host must be a whole number from 1 to 16, got '$ranks_per_host'"
((ranks * ranks_per_host <= 128)) ||
  die_usage "--ranks $ranks x --ranks-per-host $ranks_per_host is $((ranks * ranks_per_host)) ranks; at most 128"
total_ranks=$((ranks * ranks_per_host))
case "$node_link" in
  tcp) ;;
  shm) ((ranks_per_host > 1)) || die_usage "--node-link shm needs --ranks-per-host 2 or more (one rank per host has no same-host peer)" ;;
  *) die_usage "--node-link takes tcp or shm, got '$node_link'" ;;
esac
[[ -n ${algos// /} ]] || die_usage "--algos is empty"
for a in $algos; do
  case "$a" in
    auto | flat) ;;
    twolevel)
      # terse refuses a forced two-level call on a layout without it (every rank errors); say
      # so here, before any namespace exists.
      ((ranks_per_host > 1)) ||
        die_usage "--algos twolevel needs --ranks-per-host 2 or more (with one rank per host there is no node level)"
      ;;
    *) die_usage "--algos takes auto, flat and twolevel, got '$a'" ;;
  esac
done
[[ $(echo $algos | tr ' ' '\n' | sort | uniq -d) == "" ]] || die_usage "--algos names an algorithm twice: '$algos'"
# With auto next to flat or twolevel, terse-bench labels auto's rows "auto-flat" or
# "auto-twolevel" (what its measured choice ran), so they stay rows of their own.
[[ $iters =~ ^[0-9]+$ ]] && ((iters >= 1)) || die_usage "--iters must be a positive whole number, got '$iters'"
[[ $warmup =~ ^[0-9]+$ ]] || die_usage "--warmup must be a whole number, got '$warmup'"
[[ $run_timeout =~ ^[0-9]+$ ]] && ((run_timeout >= 1)) ||
  die_usage "--timeout must be a positive number of seconds, got '$run_timeout'"
# Namespace names become file names under /run/netns and parts of host names: keep them plain.
[[ $prefix =~ ^[a-z][a-z0-9-]{0,23}$ ]] ||
  die_usage "--prefix must be lower-case letters, digits and '-', starting with a letter, at most 24 characters; got '$prefix'"
[[ -n ${rates// /} ]] || die_usage "--rates is empty"
for r in $rates; do
  [[ $r == unshaped ]] && continue
  [[ $r =~ ^[0-9]+(\.[0-9]+)?$ ]] && [[ $r != 0 && ! $r =~ ^0+(\.0+)?$ ]] ||
    die_usage "--rates takes positive numbers of Gbit/s such as \"1 10 25\" or unshaped, got '$r'"
done
[[ -n ${sizes// /} ]] || die_usage "--sizes is empty"
for s in $sizes; do
  [[ $s =~ ^[0-9]+[KMG]?$ ]] || die_usage "--sizes takes byte counts with an optional K, M or G suffix, got '$s'"
done
[[ -n ${codecs// /} ]] || die_usage "--codecs is empty"
for c in $codecs; do
  # Specs as terse-bench takes them (docs/codecs.md); terse-bench itself checks the options.
  [[ $c =~ ^[a-z0-9_]+(:[a-z0-9_]+=[a-z0-9_.]+(,[a-z0-9_]+=[a-z0-9_.]+)*)?$ ]] ||
    die_usage "--codecs takes codec specs such as none, int8, topk:ratio=0.01, auto:max=onebit; got '$c'"
done
if ((probe_only)); then
  do_terse=0 do_mpi=0 do_plot=0 do_probe=1
fi
((do_terse || probe_only)) || [[ $do_mpi != 0 ]] || die_usage "--no-terse together with --no-mpi leaves nothing to run"

[[ -n $out_dir ]] || out_dir="$root_dir/bench-results/network-$(date -u +%Y%m%d-%H%M%S)"
[[ $build_dir = /* ]] || build_dir="$root_dir/$build_dir"
terse_bench="$build_dir/bin/terse-bench"
mpi_bench="$build_dir/bin/mpi-allreduce-bench"
plot_py=/usr/bin/python3 # Debian's python3 is the one with python3-matplotlib.
net=10.213.0            # Host i is $net.i on an isolated bridge; nothing routes to or from it.

bridge_ns="$prefix-br"
host_ns() { echo "$prefix-h$1"; }
host_addr() { echo "$net.$1"; }

# ---- environment checks ----------------------------------------------------------------------
refuse() {
  echo "bench-network: $*" >&2
  exit $kSkip
}

netns_usable || refuse "$NETNS_ERROR (try: sudo $0 ...)"
if ((do_terse)); then
  [[ -x $terse_bench ]] || {
    echo "bench-network: $terse_bench not found: build first (scripts/build.sh) or set TERSE_BUILD_DIR" >&2
    exit 2
  }
fi
if [[ $do_mpi == auto ]]; then
  if [[ -x $mpi_bench ]] && command -v mpirun >/dev/null; then
    do_mpi=1
  else
    do_mpi=0
    echo "bench-network: OpenMPI comparison skipped: $( [[ -x $mpi_bench ]] && echo "mpirun not found" || echo "$mpi_bench not built (needs OpenMPI at configure time)")" >&2
  fi
fi
((do_terse || do_mpi || probe_only)) || { echo "bench-network: nothing left to run" >&2; exit 2; }
if ((do_plot)); then
  "$plot_py" -c 'import matplotlib' 2>/dev/null ||
    { echo "bench-network: $plot_py cannot import matplotlib: apt-get install python3-matplotlib, or pass --no-plot" >&2; exit 2; }
fi

our_namespaces() { netns_list "$prefix"; }
kill_namespace_processes() { netns_kill_processes "$@"; }
delete_namespaces() { netns_delete "$prefix"; }

stale=$(our_namespaces)
if [[ -n $stale ]]; then
  if ((clean)); then
    echo "bench-network: removing namespaces left by an earlier run: $(echo $stale)"
    delete_namespaces
  else
    refuse "namespaces from an earlier run still exist ($(echo $stale)); another run may be active. Remove them with --clean, or pick another --prefix"
  fi
fi

# ---- teardown on every exit path ---------------------------------------------------------------
created=0
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if ((created)); then
    if ((keep)); then
      echo "bench-network: --keep: namespaces left up: $(our_namespaces | tr '\n' ' '); remove them with: $0 --prefix $prefix --clean --probe-only --rates 1  (or ip netns del NAME)" >&2
    else
      delete_namespaces
      local left
      left=$(our_namespaces)
      [[ -z $left ]] || echo "bench-network: namespaces still present after teardown: $left" >&2
    fi
  fi
  exit $rc
}
trap teardown EXIT
trap 'echo; echo "bench-network: interrupted, tearing down" >&2; exit 130' INT
trap 'echo "bench-network: terminated, tearing down" >&2; exit 143' TERM

# ---- topology (scripts/lib/netns.sh) ---------------------------------------------------------
setup_topology() {
  created=1
  netns_setup "$prefix" "$net" "$ranks" || refuse "$NETNS_ERROR"
}

shape_links() {
  if [[ $1 == unshaped ]]; then
    # A limit that cannot be taken off again is a fault, not a machine that cannot emulate links.
    netns_unshape "$prefix" "$ranks" || { echo "bench-network: $NETNS_ERROR" >&2; exit 1; }
  else
    netns_shape "$prefix" "$ranks" "$1" || refuse "$NETNS_ERROR"
  fi
}

# The rate as runs.jsonl and setup.json record it: a number, 0 for an unshaped link; as file
# names and messages show it.
rate_number() {
  # awk normalises what the option check lets through ("01", "1.50") into a JSON number.
  if [[ $1 == unshaped ]]; then echo 0; else awk -v r="$1" 'BEGIN { print r + 0 }'; fi
}
rate_tag() {
  if [[ $1 == unshaped ]]; then echo unshaped; else echo "${1}gbit"; fi
}
rate_text() {
  if [[ $1 == unshaped ]]; then echo "the unshaped link"; else echo "the $1 Gbit/s link"; fi
}

wait_for_links() {
  netns_wait_reachable "$prefix" "$net" "$ranks" || { echo "bench-network: $NETNS_ERROR" >&2; exit 1; }
}

# ---- running things inside the namespaces ----------------------------------------------------
progress() {
  # One line rewritten in place on a terminal; a line every 30 s in a log.
  if [[ -t 1 ]]; then
    printf '\r\033[K%s' "$*"
  else
    echo "$*"
  fi
}

# wait_ranks LABEL RCDIR N: waits until N rank exit codes are in RCDIR, a rank fails, or the
# timeout passes; kills whatever is still running in our namespaces in the last two cases.
wait_ranks() {
  local label=$1 rc_dir=$2 n=$3 start now elapsed done_count failed=""
  start=$(date +%s)
  local last_line=0
  while :; do
    done_count=0
    failed=""
    local f
    for f in "$rc_dir"/*.rc; do
      [[ -e $f ]] || continue
      done_count=$((done_count + 1))
      [[ $(cat "$f") == 0 ]] || failed+=" $(basename "$f" .rc)=$(cat "$f")"
    done
    now=$(date +%s)
    elapsed=$((now - start))
    if [[ -n $failed ]] || ((done_count == n)) || ((elapsed >= run_timeout)); then
      break
    fi
    if [[ -t 1 ]] || ((elapsed - last_line >= 30)); then
      progress "$label: $elapsed s, $done_count/$n processes done"
      last_line=$elapsed
    fi
    sleep 1
  done
  [[ -t 1 ]] && printf '\r\033[K'
  if [[ -n $failed || $done_count -lt $n ]]; then
    # shellcheck disable=SC2046
    kill_namespace_processes $(our_namespaces)
    sleep 0.5
    if [[ -n $failed ]]; then
      echo "bench-network: $label FAILED:$failed (exit status per process)" >&2
    else
      echo "bench-network: $label TIMED OUT after ${run_timeout} s ($done_count/$n processes finished)" >&2
    fi
    return 1
  fi
  echo "$label: done in $elapsed s"
  return 0
}

show_logs() {
  local f
  for f in "$@"; do
    [[ -s $f ]] || continue
    echo "---- last lines of $f ----" >&2
    tail -n 20 "$f" >&2
  done
}

record_run() {
  # One JSON line per run for plot_network.py: what ran, at which rate, and where its rows are.
  printf '{"impl": "%s", "rate_gbit": %s, "size": "%s", "file": "%s", "probe_gbit": %s, "seconds": %s}\n' \
    "$1" "$(rate_number "$2")" "$3" "$4" "$5" "$6" >>"$out_dir/runs.jsonl"
}

# What UCX may use. tcp only: nothing can bypass the shaping (UCX alone would put ranks of
# different namespaces on shared memory: one machine), and terse sends eagerly over TCP. shm adds
# UCX's shared-memory transports: terse connects the ranks of its own node (TERSE_NODE, same host
# and pid namespace) without peer-failure mode so that UCX can use them, while every other peer
# keeps peer-failure mode, which UCX 1.13's shared memory cannot serve, so the hosts still talk
# TCP over eth0 (rendezvous for large messages then, as eager TCP is for TCP-only lists).
ucx_tls=tcp
[[ $node_link == shm ]] && ucx_tls=tcp,sysv,posix,cma,self
mpi_btl=tcp,self
[[ $node_link == shm ]] && mpi_btl=tcp,vader,self

# terse-bench takes --codec once per codec ("all" expands to every codec) and --algo once per
# algorithm (each algorithm is timed with every codec).
codec_args=()
for c in $codecs; do codec_args+=(--codec "$c"); done
for a in $algos; do codec_args+=(--algo "$a"); done
((interleave)) && codec_args+=(--interleave)

run_terse() {
  local rate=$1 size=$2 probe=$3 tag
  tag="terse-$(rate_tag "$1")-$2"
  local rc_dir="$out_dir/rc/$tag" r pids=()
  rm -rf "$rc_dir"
  mkdir -p "$rc_dir"
  local store t0
  store="$(host_addr 1):29517"
  t0=$(date +%s)
  for ((r = 0; r < total_ranks; r++)); do
    local ns json log host
    # Ranks fill the hosts in order (ranks 0..K-1 on host 1, ...), as a launcher's block mapping
    # and terse-run --nodes do. TERSE_NODE tells terse which ranks share a host: the hosts are
    # one machine, so the host name and boot id it would use otherwise are the same for all.
    host=$((r / ranks_per_host + 1))
    ns=$(host_ns $host)
    json="$out_dir/raw/$tag.json" # only rank 0 writes it
    log="$out_dir/logs/$tag-rank$r.log"
    (
      # $ucx_tls: see above. Ranks of one host share its address, so their TCP (--node-link tcp)
      # goes over the namespace's loopback, unshaped.
      ip netns exec "$ns" env TERSE_RANK=$r TERSE_WORLD_SIZE=$total_ranks TERSE_STORE="$store" \
        TERSE_NODE="$ns" TERSE_LOCAL_RANK=$((r % ranks_per_host)) TERSE_LOCAL_SIZE=$ranks_per_host \
        UCX_TLS=$ucx_tls UCX_NET_DEVICES=eth0 \
        "$terse_bench" allreduce -b "$size" -e "$size" -n "$iters" -w "$warmup" \
        "${codec_args[@]}" -J "$json" >"$log" 2>&1 && rc=0 || rc=$?
      echo $rc >"$rc_dir/rank$r.rc"
    ) &
  done
  if ! wait_ranks "[$run_index/$run_total] terse $size over $(rate_text "$rate")" "$rc_dir" "$total_ranks"; then
    wait
    show_logs "$out_dir/logs/$tag"-rank*.log
    exit 1
  fi
  wait
  [[ -s "$out_dir/raw/$tag.json" ]] || {
    echo "bench-network: terse-bench rank 0 wrote no JSON ($out_dir/raw/$tag.json)" >&2
    show_logs "$out_dir/logs/$tag-rank0.log"
    exit 1
  }
  record_run terse "$rate" "$size" "raw/$tag.json" "$probe" $(($(date +%s) - t0))
}

write_mpi_launcher() {
  # mpirun's remote-shell agent: host terse-hK means "run in namespace terse-hK with its own
  # host name", so one mpirun started in terse-h1 places --ranks-per-host ranks on each emulated
  # host (slots=K, filled in order as terse's ranks are). Any other host name is refused, so
  # nothing can be started outside our namespaces.
  local agent="$out_dir/mpi/launch-agent.sh" hostfile="$out_dir/mpi/hostfile" i allowed=""
  mkdir -p "$out_dir/mpi"
  for ((i = 1; i <= ranks; i++)); do allowed+="$(host_ns $i)|"; done
  allowed=${allowed%|}
  cat >"$agent" <<EOF
#!/bin/sh
# Generated by bench-network.sh: maps emulated host names to network namespaces.
host=\$1
shift
case "\$host" in
  $allowed) ;;
  *) echo "launch-agent: refusing unknown host '\$host' (only $allowed)" >&2; exit 1 ;;
esac
exec ip netns exec "\$host" unshare --uts sh -c "hostname \$host && \$*"
EOF
  chmod +x "$agent"
  : >"$hostfile"
  for ((i = 1; i <= ranks; i++)); do echo "$(host_ns $i) slots=$ranks_per_host" >>"$hostfile"; done
}

run_mpi() {
  local rate=$1 size=$2 probe=$3 tag
  tag="mpi-$(rate_tag "$1")-$2"
  local rc_dir="$out_dir/rc/$tag" t0
  rm -rf "$rc_dir"
  mkdir -p "$rc_dir"
  t0=$(date +%s)
  local json="$out_dir/raw/$tag.json" log="$out_dir/logs/$tag.log"
  (
    # pml ob1 + btl tcp: OpenMPI's own TCP path over eth0 (pml ucx would pick shared memory);
    # ranks of one host reach each other over TCP on its loopback, as terse's do.
    ip netns exec "$(host_ns 1)" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$(host_ns 1)" \
      mpirun --allow-run-as-root --oversubscribe -np "$total_ranks" --map-by slot \
      --hostfile "$out_dir/mpi/hostfile" \
      --mca plm_rsh_agent "$out_dir/mpi/launch-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
      --mca pml ob1 --mca btl "$mpi_btl" --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
      -x UCX_TLS=tcp -x UCX_NET_DEVICES=eth0 \
      "$mpi_bench" -b "$size" -e "$size" -n "$iters" -w "$warmup" -J "$json" >"$log" 2>&1 && rc=0 || rc=$?
    echo $rc >"$rc_dir/mpirun.rc"
  ) &
  if ! wait_ranks "[$run_index/$run_total] OpenMPI $size over $(rate_text "$rate")" "$rc_dir" 1; then
    wait
    show_logs "$log"
    exit 1
  fi
  wait
  [[ -s $json ]] || { echo "bench-network: mpi-allreduce-bench wrote no JSON ($json)" >&2; show_logs "$log"; exit 1; }
  record_run openmpi "$rate" "$size" "raw/$tag.json" "$probe" $(($(date +%s) - t0))
}

probe_link() {
  # Raw TCP from host 2 to host 1 for 2 s: the rate one stream really gets on this link.
  local rate=$1 port=29518 result
  local log
  log="$out_dir/logs/probe-$(rate_tag "$rate").log"
  ip netns exec "$(host_ns 1)" "$plot_py" "$root_dir/bench/link_probe.py" recv "$(host_addr 1)" $port >"$log" 2>&1 &
  local recv_pid=$!
  ip netns exec "$(host_ns 2)" "$plot_py" "$root_dir/bench/link_probe.py" send "$(host_addr 1)" $port 2 2>>"$log" || true
  wait $recv_pid || true
  result=$(awk 'NF == 3 { print $3 }' "$log" | tail -n1)
  echo "${result:-null}"
}

# ---- main ------------------------------------------------------------------------------------
mkdir -p "$out_dir/raw" "$out_dir/logs" "$out_dir/rc"
out_dir=$(cd "$out_dir" && pwd)
: >"$out_dir/runs.jsonl"
n_rates=$(echo $rates | wc -w)
n_sizes=$(echo $sizes | wc -w)
run_total=$((n_rates * n_sizes * (do_terse + do_mpi)))
run_index=0

command_line() {
  # The command as a person would retype it: arguments with spaces in double quotes.
  local line=$0 a
  for a in "${orig_args[@]}"; do
    if [[ $a =~ [^A-Za-z0-9_./:=+-] ]]; then line+=" \"$a\""; else line+=" $a"; fi
  done
  echo "$line"
}

caller_environment() {
  # The UCX_* and TERSE_* variables the ranks inherit (e.g. UCX_RNDV_THRESH=inf), as JSON members.
  local name value first=1
  while IFS= read -r name; do
    value=$(printenv "$name" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n')
    ((first)) || printf ', '
    first=0
    printf '"%s": "%s"' "$name" "$value"
  done < <(env | sed -n 's/^\(\(UCX\|TERSE\)_[A-Za-z0-9_]*\)=.*/\1/p' | sort)
}

cat >"$out_dir/setup.json" <<EOF
{
  "command": "$(command_line | sed 's/\\/\\\\/g; s/"/\\"/g')",
  "date_utc": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "git_commit": "$(git -C "$root_dir" rev-parse --short HEAD 2>/dev/null || echo unknown)",
  "ranks": $total_ranks,
  "hosts": $ranks,
  "ranks_per_host": $ranks_per_host,
  "algos": "$(echo $algos)",
  "rates_gbit": [$(for r in $rates; do printf '%s,' "$(rate_number "$r")"; done | sed 's/,$//; s/,/, /g')],
  "sizes": [$(for s in $sizes; do printf '"%s",' "$s"; done | sed 's/,$//')],
  "codecs": "$(echo $codecs)",
  "iters": $iters,
  "warmup": $warmup,
  "cpus": $(nproc),
  "kernel": "$(uname -r)",
  "cpu_model": "$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/"/\\"/g')",
  "shaping": "tc tbf on both ends of each veth (host eth0 and bridge port), burst max(256 KiB, 1 ms at rate), latency 50ms; none at rate 0 (unshaped)",
  "environment": {$(caller_environment)},
  "node_link": "$node_link",
  "terse_transport": "UCX_TLS=$ucx_tls UCX_NET_DEVICES=eth0, TERSE_NODE=<host namespace>",
  "openmpi": "$(mpirun --version 2>/dev/null | head -n1 | sed 's/"/\\"/g')",
  "openmpi_flags": "--mca pml ob1 --mca btl $mpi_btl --mca btl_tcp_if_include eth0"
}
EOF

echo "bench-network: $ranks emulated hosts x $ranks_per_host rank(s) ($(host_ns 1)..$(host_ns $ranks), bridge in $bridge_ns), node link: $node_link, algorithms: $algos, rates (Gbit/s): $rates, sizes: $sizes, results in $out_dir"
setup_topology
((do_mpi)) && write_mpi_launcher

for rate in $rates; do
  shape_links "$rate"
  wait_for_links
  probe=null
  if ((do_probe)); then
    probe=$(probe_link "$rate")
    echo "$(rate_text "$rate"): one TCP stream measured $probe Gbit/s"
  fi
  for size in $sizes; do
    if ((do_terse)); then
      run_index=$((run_index + 1))
      run_terse "$rate" "$size" "$probe"
    fi
    if ((do_mpi)); then
      run_index=$((run_index + 1))
      run_mpi "$rate" "$size" "$probe"
    fi
  done
done

if ((do_plot)); then
  "$plot_py" "$root_dir/bench/plot_network.py" "$out_dir"
else
  echo "bench-network: raw results in $out_dir/raw, index in $out_dir/runs.jsonl"
fi
