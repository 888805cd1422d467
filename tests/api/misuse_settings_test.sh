#!/usr/bin/env bash
# Misuse of settings (issue #22, docs/env.md "malformed is an error naming it"):
#  1. each malformed value below makes terse_comm_create fail with TERSE_INVALID_ARGUMENT and a
#     message naming the variable (never a silent default, a warning, or a crash);
#  2. two processes started with the same TERSE_RANK: not both succeed, a failure names the rank,
#     and no process runs past 5 s (TCP store and file store).
# usage: misuse_settings_test.sh path/to/misuse_c_test work-dir
# Every check runs; the script exits 1 after listing all that failed.
set -u
prog=${1:?usage: misuse_settings_test.sh misuse_c_test work-dir}
work=${2:?usage: misuse_settings_test.sh misuse_c_test work-dir}
rm -rf "$work" && mkdir -p "$work"
failed=()
# Never inherit a launcher's world: each check sets what it needs.
clean=(env -u TERSE_RANK -u TERSE_WORLD_SIZE -u TERSE_LOCAL_RANK -u TERSE_STORE -u RANK
       -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE
       -u SLURM_PROCID -u SLURM_NTASKS -u TERSE_TIMEOUT_MS)

# run_world DIR STORE "RANKS" [VAR=VALUE ...]: one `misuse_c_test create` process per entry of RANKS
# (a world of 2, or of ${WORLD:-2}), each under `timeout 5`, outputs in DIR/p<i>.out, exit codes
# in the array rcs. create_only exits 0 (created and a barrier + allreduce worked), 2 (create
# failed with TERSE_INVALID_ARGUMENT), 1 (create failed otherwise) or 3 (created, use failed).
rcs=()
run_world() {
  local dir=$1 store=$2 ranks=($3) i pids=()
  shift 3
  mkdir -p "$dir"
  rcs=()
  for i in "${!ranks[@]}"; do
    "${clean[@]}" TERSE_RANK=${ranks[$i]} TERSE_LOCAL_RANK=${ranks[$i]} \
      TERSE_WORLD_SIZE=${WORLD:-2} TERSE_STORE="$store" TERSE_TIMEOUT_MS=4000 "$@" \
      timeout -k 1 5 "$prog" create >"$dir/p$i.out" 2>&1 &
    pids+=($!)
    [[ $i -eq 0 ]] && sleep 0.2 # rank 0 serves a TCP store
  done
  for i in "${!ranks[@]}"; do
    wait "${pids[$i]}"
    rcs+=($?)
  done
}
# A fresh file-store directory per world (a reused one would hold the last world's addresses).
n_stores=0
next_store() { n_stores=$((n_stores + 1)); store=$work/store-$n_stores; }
report_line() { grep -E '^(create|use):' "$1" | tr '\n' ' '; }

# expect_rejected VAR=VALUE [regex the message must also match] [extra VAR=VALUE ...]
# Both ranks of a world of 2 must fail create with TERSE_INVALID_ARGUMENT naming VAR: a world of
# one might never read a transport setting, so a world of 2 is the case a user has.
expect_rejected() {
  local setting=$1 also=${2:-} var=${1%%=*} i t0=$SECONDS
  shift 2 2>/dev/null || shift
  next_store
  local dir=$work/check-$n_stores
  run_world "$dir" "$store" "0 1" "$@" "$setting"
  for i in 0 1; do
    local line=$(grep -m1 '^create:' "$dir/p$i.out")
    echo "settings: $setting: rank $i exit ${rcs[$i]}: $(report_line "$dir/p$i.out")"
    if [[ ${rcs[$i]} -ne 2 ]]; then
      failed+=("$setting: rank $i: expected TERSE_INVALID_ARGUMENT (exit 2), got exit ${rcs[$i]}: $(report_line "$dir/p$i.out")")
    elif [[ $line != *"$var"* ]]; then
      failed+=("$setting: rank $i: the message does not name $var: $line")
    elif [[ -n $also ]] && ! [[ $line =~ $also ]]; then
      failed+=("$setting: rank $i: the message does not match /$also/: $line")
    fi
  done
  echo "settings: $setting took $((SECONDS - t0)) s"
}

for v in abc -1 100000; do expect_rejected "TERSE_CPU_THREADS=$v"; done
expect_rejected "TERSE_DEBUG=whatever"
expect_rejected "TERSE_DEBUG_SUBSYS=BOGUS"
for v in abc 0 1 -5 9223372036854775807; do expect_rejected "TERSE_SEGMENT_BYTES=$v"; done
for v in x 0 9999; do expect_rejected "TERSE_PIPELINE_DEPTH=$v"; done
expect_rejected "TERSE_SMALL_BYTES=-1"
# The value as given, not wrapped to 32 bits (it once read -2147483648).
expect_rejected "TERSE_WORLD_SIZE=2147483648" '(^|[^-0-9])2147483648'

# TERSE_TIMEOUT_MS of about 292 years once made every deadline overflow, failing every call at
# once. Either answer is a correct contract: rejected as out of range naming the variable (exit
# 2 on both ranks), or accepted with calls that work (exit 0 on both ranks: create_only ran a
# barrier and an allreduce).
dir=$work/timeout-huge
next_store
run_world "$dir" "$store" "0 1" TERSE_TIMEOUT_MS=9223372036854775807
for i in 0 1; do
  echo "settings: TERSE_TIMEOUT_MS=9223372036854775807: rank $i exit ${rcs[$i]}: $(report_line "$dir/p$i.out")"
done
if ! { [[ ${rcs[0]} -eq 0 && ${rcs[1]} -eq 0 ]] ||
       { [[ ${rcs[0]} -eq 2 && ${rcs[1]} -eq 2 ]] &&
         grep -q '^create:.*TERSE_TIMEOUT_MS' "$dir/p0.out"; }; }; then
  failed+=("TERSE_TIMEOUT_MS=9223372036854775807: neither rejected naming it nor usable (exits ${rcs[*]})")
fi

# Two processes claim rank 1 of a world of 2 (TCP store served by rank 0, and a file store):
# not both may create a communicator, a failed create must name rank 1, and no process may run
# past 5 s.
duplicate_rank() {
  local where=$1 label=$2 dir=$work/dup-$2 who=(0 1 1) i created1=0 named=0
  run_world "$dir" "$where" "${who[*]}"
  for i in 0 1 2; do
    local line=$(grep -m1 '^create:' "$dir/p$i.out")
    echo "settings: duplicate rank ($label): process $i (rank ${who[$i]}) exit ${rcs[$i]}:" \
         "$(report_line "$dir/p$i.out")"
    if [[ ${rcs[$i]} -eq 124 || ${rcs[$i]} -eq 137 ]]; then
      failed+=("duplicate rank ($label): process $i (rank ${who[$i]}) still ran after 5 s")
    fi
    if [[ ${who[$i]} -eq 1 && $line == "create: ok:"* ]]; then created1=$((created1 + 1)); fi
    if [[ -n $line && $line != "create: ok:"* && $line == *"rank 1"* ]]; then named=1; fi
  done
  if [[ $created1 -ge 2 ]]; then
    failed+=("duplicate rank ($label): both processes claiming rank 1 created a communicator")
  fi
  if [[ $named -eq 0 ]]; then
    failed+=("duplicate rank ($label): no failed terse_comm_create names \"rank 1\"")
  fi
}
# The torch tests' port picker: below the kernel's ephemeral range, where a client socket of a
# concurrent test cannot take the port before the store binds it (binding port 0 draws inside it).
examples=$(cd "$(dirname "$0")/../../examples/pytorch" && pwd)
port=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from ddp_hooks import free_port_pair; print(free_port_pair())' "$examples")
duplicate_rank "127.0.0.1:$port" tcp
next_store
duplicate_rank "$store" file

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "misuse_settings_test: ${#failed[@]} check(s) FAILED:"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "misuse_settings_test: all checks passed"
