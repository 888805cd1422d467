#!/usr/bin/env bash
# The robustness stage of CI (docs/reliability.md): a short fuzzing pass over every fuzz target
# (fixed runs each), the AddressSanitizer + UndefinedBehaviorSanitizer build's test labels, and
# the ThreadSanitizer build's thread tests and soak run. Each prints its own build and run times.
#   TERSE_FUZZ_RUNS (default 20000) sets the runs per fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/fuzz.sh --runs "${TERSE_FUZZ_RUNS:-20000}"
t1=$(date +%s)
bash scripts/sanitize.sh
t2=$(date +%s)
TERSE_SANITIZE_MODE=thread bash scripts/sanitize.sh
t3=$(date +%s)
echo "ci-extra.sh: fuzz.sh $((t1 - t0)) s, sanitize.sh (address,undefined) $((t2 - t1)) s," \
  "sanitize.sh (thread) $((t3 - t2)) s"
