#!/bin/sh
# Fails unless the plugin's dynamic symbol table defines exactly the NCCL plugin tables:
# ncclNetPlugin_vN and ncclCollNetPlugin_vN for every N of TERSE_NCCL_ABI_VERSIONS in the
# umbrella header (plugin/abi/nccl_plugin.h), nothing else; and unless that list names every
# frozen header plugin/abi holds (a net_vN.h nobody exports is a version half added).
# Usage: check_exports.sh path/to/libnccl-net-terse.so path/to/plugin/abi/nccl_plugin.h
set -eu
lib=$1
header=$2
versions=$(sed -n 's/^#define TERSE_NCCL_ABI_VERSIONS //p' "$header" | tr -d ' ' | tr ',' ' ')
if [ -z "$versions" ]; then
  echo "no '#define TERSE_NCCL_ABI_VERSIONS' line in $header"
  exit 1
fi
echo "versions in $header: $versions"
defined=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
echo "defined dynamic symbols of $lib:"
echo "$defined"
status=0
for v in $versions; do
  for want in ncclNetPlugin_v$v ncclCollNetPlugin_v$v; do
    if ! echo "$defined" | grep -qx "$want"; then
      echo "MISSING: $want"
      status=1
    fi
  done
done
for sym in $defined; do
  case " $versions " in
    *" ${sym##*_v} "*) case $sym in ncclNetPlugin_v* | ncclCollNetPlugin_v*) continue ;; esac ;;
  esac
  echo "UNEXPECTED export: $sym"
  status=1
done
abi_dir=$(dirname "$header")
for f in "$abi_dir"/net_v*.h "$abi_dir"/collnet_v*.h; do
  v=${f##*_v}
  v=${v%.h}
  case " $versions " in
    *" $v "*) ;;
    *)
      echo "NOT LISTED: $f has no version $v in TERSE_NCCL_ABI_VERSIONS"
      status=1
      ;;
  esac
done
exit $status
