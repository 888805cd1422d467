#!/usr/bin/env bash
# check_headers.sh must catch what it is for: run on a copy of include/ it passes, and on the
# same copy with a header that includes a layer header, one that is not self-contained and one
# installed outside include/terse/, it fails naming each. Without this, a check that matched no
# include line or compiled nothing would pass for ever.
set -euo pipefail
source_dir=$1
check=$source_dir/tests/package/check_headers.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$source_dir/include" "$work/include"
bash "$check" "$work/include" > "$work/clean.out"

mkdir -p "$work/include/terse/collectives"
printf '#pragma once\n#include "terse/collectives/worker.h"\n' > "$work/include/terse/leaky.h"
printf '#pragma once\ninline std::string name() { return "x"; }\n' > "$work/include/terse/partial.h"
printf '#pragma once\n' > "$work/include/terse/collectives/engine.h"
if bash "$check" "$work/include" > "$work/bad.out" 2>&1; then
  echo "check_headers.sh passed a directory with three broken headers" >&2
  exit 1
fi
for want in "terse/leaky.h includes terse/collectives/worker.h, which is not installed" \
    "terse/partial.h does not compile alone as C++" \
    "installed header outside include/terse/: terse/collectives/engine.h"; do
  grep -qF "$want" "$work/bad.out" || {
    echo "check_headers.sh did not report: $want" >&2
    cat "$work/bad.out" >&2
    exit 1
  }
done
echo "check_headers.sh passes include/ and names each of three broken headers"
