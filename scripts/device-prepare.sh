#!/usr/bin/env bash
# Gathers, on this (Debian 12) machine, what a lent GPU machine lacks to build terse's GPU checks
# and run them (docs/cuda.md, "Checking on a lent GPU"): the Debian packages of UCX and what
# libucp links, zstd, GoogleTest/GoogleMock, Google Benchmark and pkgconf, fetched with
# `apt-get download` into ONE git-ignored folder, ${TERSE_DEVICE_KIT:-.device-kit}/debs.
# scripts/device-check.sh unpacks them there into a private prefix (never into /). The GPU
# machine reaches no package registry, so this runs here, before the loan.
#
# Prints the folder's contents and size and fails when it is over the budget (the working tree
# and every carried folder travel in 64 MiB together; the kit gets at most 16 MiB of that).
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${TERSE_DEVICE_KIT:-.device-kit}
budget_kib=$((16 * 1024))

# Runtime libraries and their -dev halves. libucp.so links libucs, libuct, libucm and libnuma;
# its ib and rdmacm modules link libibverbs and librdmacm (no provider: UCX then finds no RDMA
# device and uses TCP and shared memory, which is all two processes on one machine need).
# googletest (the sources) is left out: libgtest-dev and libgmock-dev carry the built libraries.
packages=(
  libucx0 libucx-dev libnuma1 libibverbs1 librdmacm1
  libzstd1 libzstd-dev
  libgtest-dev libgmock-dev
  libbenchmark1debian libbenchmark-dev
  pkgconf-bin libpkgconf3
)

rm -rf "$kit"
mkdir -p "$kit/debs"
download() { (cd "$kit/debs" && apt-get download -q "${packages[@]}" >/dev/null); }
if ! download; then
  echo "device-prepare: apt-get download failed; refreshing the package lists once" >&2
  apt-get update -q >/dev/null
  download
fi
# The architecture device-check.sh checks against, and what this was taken from.
{
  echo "made: $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "arch: $(dpkg --print-architecture)"
  echo "glibc: $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')"
  echo "packages: ${packages[*]}"
} >"$kit/MANIFEST"
case "$kit" in
  /*) ;;  # outside the checkout (ctest's dry run): nothing to ignore
  *) git check-ignore -q "$kit" || echo "device-prepare: WARNING: $kit is not git-ignored" >&2 ;;
esac

echo "device-prepare: $kit"
(cd "$kit/debs" && for f in *.deb; do printf '  %-60s %6s KiB\n' "$f" $(($(stat -c %s "$f") / 1024)); done)
size_kib=$(du -sk "$kit" | cut -f1)
echo "device-prepare: $kit holds $(ls "$kit/debs" | wc -l) packages, ${size_kib} KiB in all (budget ${budget_kib} KiB)"
if [ "$size_kib" -gt "$budget_kib" ]; then
  echo "device-prepare: FAIL: $kit is over its budget" >&2
  exit 1
fi
tree_kib=$(git ls-files -z -co --exclude-standard | du -ck --files0-from=- 2>/dev/null | tail -1 | cut -f1)
echo "device-prepare: the working tree that travels is about ${tree_kib} KiB; with $kit $((tree_kib + size_kib)) KiB of 65536"
echo "device-prepare: carry it with the call: run(command='bash scripts/device-check.sh \$OUT', carry=['$kit'])"
