# shellcheck shell=bash
# The ucx_perftest runner shared by scripts/bench-p2p.sh and scripts/bench-netplugin.sh
# (sourced): one `ucx_perftest -t tag_bw` measurement over loopback, server and client on this
# machine. UCX settings (UCX_TLS, UCX_NET_DEVICES, ...) come from the caller's environment, the
# same for both sides.

# perftest_mbs SIZE ITERS [FLAGS...] -> the run's overall bandwidth in MB/s (2^20 bytes) on
# stdout. FLAGS go to the client, which drives the test (e.g. -w 20 warm-up iterations, -O 32
# messages in flight, -e peer error handling). The server is started on a
# random port in the background and the client retries until it answers; a port another process
# holds makes the server exit, and the next of three ports is tried. Returns 1 (nothing printed)
# when no attempt measured anything.
perftest_mbs() {
  local size=$1 iters=$2 port server out tries
  shift 2
  for _ in 1 2 3; do
    port=$((20000 + RANDOM % 20000))
    ucx_perftest -p "$port" >/dev/null 2>&1 &
    server=$!
    out=""
    for ((tries = 0; tries < 50; tries++)); do
      if out=$(timeout 300 ucx_perftest 127.0.0.1 -p "$port" -t tag_bw -s "$size" -n "$iters" \
                 "$@" -f 2>/dev/null); then
        break
      fi
      out=""
      kill -0 "$server" 2>/dev/null || break  # the server is gone: its port was taken
      sleep 0.1
    done
    if [[ -n $out ]]; then
      wait "$server" 2>/dev/null || true
      # Final row: iterations, latency 50%/avg/overall, bandwidth avg/overall, rate avg/overall.
      echo "$out" | awk 'NF >= 8 && $1 ~ /^[0-9]+$/ { v = $6 } END { print v }'
      return 0
    fi
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  done
  echo "perftest: ucx_perftest tag_bw failed on three ports at $size bytes" >&2
  return 1
}
