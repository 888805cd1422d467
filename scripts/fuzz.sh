#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang, ASan and UBSan into ${TERSE_FUZZ_DIR:-build-fuzz}
# and runs each one; any crash, sanitizer report, leak or violated invariant fails the script and
# leaves the input in build-fuzz/artifacts/.
#   scripts/fuzz.sh                 # CI: 20000 runs per target
#   scripts/fuzz.sh --runs 200000
#   scripts/fuzz.sh --seconds 600   # on demand: 600 s per target
#   scripts/fuzz.sh --seconds 60 fuzz_decode   # one target
# Inputs that once failed live in fuzz/regressions/<target>/ and are replayed first. The growing
# corpus stays in build-fuzz/corpus/<target>/ between runs; seeds are regenerated every run.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(-runs=20000)
targets=()
while (($#)); do
  case $1 in
    --runs) mode=(-runs="$2"); shift 2 ;;
    --seconds) mode=(-max_total_time="$2"); shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    fuzz_*) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=(fuzz_decode fuzz_spec fuzz_feedback fuzz_store fuzz_lossless fuzz_peer
  fuzz_handshake fuzz_checkpoint)
for tool in clang clang++; do
  command -v $tool >/dev/null || { echo "fuzz.sh: $tool not found (apt-get install clang)" >&2; exit 1; }
done

dir=${TERSE_FUZZ_DIR:-build-fuzz}
start=$(date +%s)
# Coverage instrumentation (fuzzer-no-link) and the sanitizers on every terse library; the fuzz
# targets add libFuzzer's main themselves.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  -DTERSE_SANITIZE=address,undefined -DTERSE_ENABLE_CUDA=OFF -DTERSE_BUILD_TESTS=OFF \
  -DTERSE_BUILD_BENCH=OFF -DTERSE_BUILD_FUZZERS=ON >/dev/null
cmake --build "$dir" -j "${TERSE_BUILD_JOBS:-2}" --target "${targets[@]}"
built=$(date +%s)

export ASAN_OPTIONS="halt_on_error=1:print_stacktrace=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
mkdir -p "$dir/artifacts"
summary=()
for t in "${targets[@]}"; do
  seeds="$dir/seeds/$t" corpus="$dir/corpus/$t" regress="fuzz/regressions/$t"
  rm -rf "$seeds"
  mkdir -p "$seeds" "$corpus"
  TERSE_FUZZ_WRITE_SEEDS="$seeds" "$dir/bin/$t"
  if [[ -d $regress ]] && compgen -G "$regress/*" >/dev/null; then
    echo "== $t: replaying $(ls "$regress" | wc -l) regression inputs"
    "$dir/bin/$t" "$regress"/*
  fi
  echo "== $t: ${mode[*]}"
  t0=$(date +%s)
  # -timeout: an input taking 10 s is a hang; -rss_limit_mb bounds what one input may allocate.
  "$dir/bin/$t" "${mode[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/$t-" "$corpus" "$seeds" 2>"$dir/$t.log" || {
    tail -60 "$dir/$t.log"
    echo "fuzz.sh: $t FAILED; the input is in $dir/artifacts/ (copy it to $regress/ once fixed)" >&2
    exit 1
  }
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/$t.log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -o 'cov: [0-9]*' "$dir/$t.log" | tail -1 || true)
  summary+=("$t: $runs runs, $cov, $(($(date +%s) - t0)) s")
done
end=$(date +%s)
printf '%s\n' "${summary[@]}"
echo "fuzz.sh: build $((built - start)) s, fuzzing $((end - built)) s"
