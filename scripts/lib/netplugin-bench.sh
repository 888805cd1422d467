# shellcheck shell=bash
# Shared by scripts/bench-netplugin.sh and scripts/bench-netplugin-lossless.sh (sourced, after
# `set -euo pipefail`): the priority switch, the build of the plugin and its benchmark driver,
# and the median of a column of numbers.

# PRIORITY=1 (root): re-run the calling script in a session of its own whose scheduler autogroup
# gets nice -15, so the builds of other sessions on a shared machine take less CPU from the
# measured processes (both sides of every comparison alike). Plain nice does not reach across
# autogroups. Call it first, with the script's arguments.
netbench_priority() {
  if [ "${PRIORITY:-0}" = 1 ] && [ -z "${TERSE_BENCH_PRIORITY_SET:-}" ]; then
    exec setsid --wait env TERSE_BENCH_PRIORITY_SET=1 bash -c \
      'echo -15 > /proc/self/autogroup || echo "PRIORITY=1: cannot raise the priority" >&2; exec "$0" "$@"' \
      "$0" "$@"
  fi
}

# Builds terse-netplugin-bench and the plugin into $build_dir (configuring it if needed).
netbench_build() {
  if [ ! -x "$build_dir/bin/terse-netplugin-bench" ]; then
    cmake -S . -B "$build_dir" -G Ninja >/dev/null
  fi
  cmake --build "$build_dir" -j2 --target terse-netplugin-bench nccl-net-terse >/dev/null
}

# Median of the numbers on stdin, one per line ("n/a" when there are none).
median() {
  grep -v '^$' | sort -g |
    awk '{a[NR]=$1} END {if (NR == 0) print "n/a"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'
}
