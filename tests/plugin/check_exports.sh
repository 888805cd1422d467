#!/bin/sh
# Fails unless the plugin's dynamic symbol table defines exactly the NCCL plugin tables:
# ncclNetPlugin_v12/_v11/_v10/_v9/_v8 and ncclCollNetPlugin_v12/.._v8, nothing else.
set -eu
lib=$1
defined=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
echo "defined dynamic symbols of $lib:"
echo "$defined"
status=0
for want in ncclNetPlugin_v12 ncclNetPlugin_v11 ncclNetPlugin_v10 ncclNetPlugin_v9 \
    ncclNetPlugin_v8 ncclCollNetPlugin_v12 ncclCollNetPlugin_v11 ncclCollNetPlugin_v10 ncclCollNetPlugin_v9 ncclCollNetPlugin_v8; do
  if ! echo "$defined" | grep -qx "$want"; then
    echo "MISSING: $want"
    status=1
  fi
done
extra=$(echo "$defined" | grep -Ev '^(ncclNetPlugin_v[0-9]+|ncclCollNetPlugin_v[0-9]+)$' || true)
if [ -n "$extra" ]; then
  echo "UNEXPECTED exports:"
  echo "$extra"
  status=1
fi
exit $status
