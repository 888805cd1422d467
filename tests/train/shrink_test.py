#!/usr/bin/env python3
"""Kill tests of terse-train --shrink-on-failure (issue #48) under terse-run --keep-going.

Each case runs WORLD ranks with a file store, kills one rank with SIGKILL, and checks that
  - the survivors finish (terse-run exits 0 naming the dead rank), all with bit-identical final
    weights, at the smaller world, having shrunk at the step their log records;
  - no survivor waited past the timeout (TERSE_TIMEOUT_MS): neither the shrink nor the time
    from the failure (or from the kill) to the next completed step reaches it;
  - the final held-out loss is within LOSS_TOL (2%, relative) of a run that continues from the
    same step at the smaller world without a failure: a WORLD-rank run stopped there with a
    checkpoint, resumed at the smaller world (the resume mode of convergence_test.py).

  between:  rank 1 is stopped by TERSE_TRAIN_HALT before a step and SIGKILLed there by this
            driver (a kill between calls); also prints the time from the kill to the next
            completed step.
  rank0:    the same for rank 0, whose death ends a TCP store (hence the file store) and whose
            successor writes the log.
  inside:   the victim dies inside a call (TERSE_FAULT=kill:..., set for the victim alone, so the
            renumbered survivors never match its rule).
  two:      ranks 1 and 2 killed before the same step (4 ranks go on as 2).
  feedback: rank 3 killed between steps of onebit with error feedback (the survivors re-lay out
            their residuals; the dead rank's are lost).
  adam-warmup, adam-freeze: --optimizer onebit-adam, a rank killed between steps during the
            warm-up (before step 150) and at the freeze (before step 301: step 300, the first
            whose momentum is compressed, has left residuals, which the survivors re-lay out).
  random:   a victim, a way (between steps or inside a call) and a point drawn from a seed
            (printed; TERSE_TEST_SEED replays it).
  figures:  --kills kills between steps (no reference runs): the median time from the kill to
            the next completed step.
  residual-cost: --kills kills between steps with onebit and error feedback: the survivors'
            held-out loss (the dead rank's residuals lost) against the same continuation with
            every residual kept (a checkpoint resumed with re-partitioned residuals).

terse-train has no split communicator: kills inside a split child are covered by
tests/api/shrink_process_test.cc (Matrix/ShrinkKill.*_split). Standard library only.
"""
import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import json

import convergence_test as ct

WORLD = 4
TIMEOUT_MS = 20000
# The global batch divides 4 and 3 ranks (the shrunk world takes the data as a run of its size
# would: the same global batch, re-cut); 3 epochs of 273 steps, about a second at 4 ranks.
BASE = ["--epochs", "3", "--batch", "120"]
RUN_TIMEOUT_S = 300

HALTING = re.compile(r"^\[(\d+)\] halting before step (\d+) \(pid (\d+)\)")
FINAL = re.compile(r"^\[\d+\] rank (\d+) of (\d+): final weights ([0-9a-f]+) after step (\d+)")
NEXT = re.compile(r"^\[\d+\] rank \d+ of \d+: step \d+ after the shrink done at monotonic "
                  r"([0-9.]+) \(([0-9.]+) s after the failure\)")
SHRUNK = re.compile(r"^\[\d+\] rank \d+ of \d+ \(was .*; shrink ([0-9.]+) s")


def kill_run(args, name, extra, victims, halt_step=None, fault=None):
    """Runs WORLD ranks of terse-train --shrink-on-failure and kills `victims` (a list): SIGKILL
    from here when they halt before `halt_step`, or one victim by its TERSE_FAULT rule `fault`.
    Returns what the survivors said and their log; failures are collected, not raised."""
    survivors = WORLD - len(victims)
    store = os.path.join(args.work, name + "-store")
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(store)
    log = os.path.join(args.work, name + ".json")
    if os.path.exists(log):
        os.remove(log)
    train = [args.terse_train] + ct.COMMON + BASE + extra + ["--shrink-on-failure", "--log", log]
    env = dict(os.environ)
    env.setdefault("UCX_NET_DEVICES", "lo")
    env["TERSE_TIMEOUT_MS"] = str(TIMEOUT_MS)
    if halt_step is not None:
        env["TERSE_TRAIN_HALT"] = ",".join(f"{v}:{halt_step}" for v in victims)
    if fault is not None:
        # For the victim alone: after the shrink a survivor may hold the victim's old rank number.
        train = ["sh", "-c", f'if [ "$TERSE_RANK" = {victims[0]} ]; then export TERSE_FAULT="{fault}"; '
                 'fi; exec "$@"', "sh"] + train
    cmd = [args.terse_run, "-n", str(WORLD), "--keep-going", "--store", store, "--"] + train
    print("+", " ".join(f"{k}={env[k]}" for k in ("TERSE_TRAIN_HALT",) if k in env),
          " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    # terse-run stops its ranks on SIGTERM: the whole run is bounded whatever happens.
    watchdog = threading.Timer(RUN_TIMEOUT_S, proc.send_signal, [signal.SIGTERM])
    watchdog.start()
    out, killed_at = [], None
    for line in proc.stdout:
        out.append(line)
        m = HALTING.match(line)
        if m and int(m.group(1)) in victims:
            os.kill(int(m.group(3)), signal.SIGKILL)
            killed_at = time.monotonic()  # the last kill
    rc = proc.wait()
    watchdog.cancel()
    r = {"output": "".join(out), "rc": rc, "killed_at": killed_at, "log": log, "failures": []}
    fail = r["failures"].append
    if rc != 0:
        fail(f"{name}: terse-run exited {rc}")
    for v in victims:
        if f"rank {v} was killed by signal 9" not in r["output"]:
            fail(f"{name}: rank {v} did not die by SIGKILL")
    finals = [FINAL.match(x) for x in out if FINAL.match(x)]
    hashes = {m.group(3) for m in finals}
    if len(finals) != survivors or len(hashes) != 1 or any(
            int(m.group(2)) != survivors for m in finals):
        fail(f"{name}: want {survivors} survivors at {survivors} ranks with one final weights "
             f"hash, got {[m.group(0) for m in finals]}")
    r["next"] = [(float(m.group(1)), float(m.group(2))) for m in map(NEXT.match, out) if m]
    r["shrink"] = [float(m.group(1)) for m in map(SHRUNK.match, out) if m]
    slowest = max([d for _, d in r["next"]] + r["shrink"] + [0])
    if len(r["next"]) < survivors or slowest >= TIMEOUT_MS / 1000:
        fail(f"{name}: {len(r['next'])} survivors reported their next step, the slowest "
             f"{slowest:.3f} s after the failure (timeout {TIMEOUT_MS / 1000:.0f} s)")
    if killed_at is not None and r["next"]:
        r["kill_to_step"] = max(t for t, _ in r["next"]) - killed_at
        if r["kill_to_step"] >= TIMEOUT_MS / 1000:
            fail(f"{name}: {r['kill_to_step']:.3f} s from the kill to the next step")
    if os.path.exists(log):
        with open(log) as f:
            r["run"] = json.load(f)
        # Two deaths at once are one shrink when the survivors see both before they decide, else
        # two: either way every victim is left out and the world ends at `survivors`.
        shrinks = r["run"]["shrinks"]
        gone = sorted(g for x in shrinks for g in x["gone"])
        if not shrinks or gone != sorted(victims) or shrinks[-1]["world"] != survivors:
            fail(f"{name}: the log's shrinks {shrinks} do not leave out ranks {victims}")
        if halt_step is not None and shrinks and shrinks[0]["step"] != halt_step:
            fail(f"{name}: killed before step {halt_step}, went on from step {shrinks[0]['step']}")
    else:
        fail(f"{name}: no log (the new rank 0 writes it)")
    if r["failures"]:
        print(r["output"])
    return r


def reference(args, name, extra, step, survivors):
    """The run without a failure: WORLD ranks stopped at `step` with a checkpoint, resumed at
    `survivors` ranks (from the start when `step` is 0)."""
    ckpt = os.path.join(args.work, name + "-ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    if step == 0:
        return ct.train(args, survivors, os.path.join(args.work, name + "-ref.json"), BASE + extra)
    ct.train(args, WORLD, os.path.join(args.work, name + "-prefix.json"),
             BASE + extra + ["--checkpoint", ckpt, "--stop-at", str(step)])
    return ct.train(args, survivors, os.path.join(args.work, name + "-ref.json"),
                    BASE + extra + ["--resume", ckpt])


def held_out(run):
    return run["epochs"][-1]["test_loss"]


def check_case(args, name, extra, victims, halt_step=None, fault=None):
    r = kill_run(args, name, extra, victims, halt_step, fault)
    survivors = WORLD - len(victims)
    failures = r["failures"]
    if "run" not in r:
        return failures
    step = r["run"]["shrinks"][0]["step"] if r["run"]["shrinks"] else 0
    ref = reference(args, name, extra, step, survivors)
    got, want = held_out(r["run"]), held_out(ref)
    same = [s for s in r["run"]["steps"] if s[0] > step] == ref["steps"]
    extra_info = f", {r['kill_to_step']:.3f} s from the kill to the next step" \
        if "kill_to_step" in r else ""
    print(f"{name}: shrank to {survivors} ranks at step {step}; held-out loss {got:.5f}, the "
          f"continuation without a failure {want:.5f} ({(got / want - 1) * 100:+.3f}%, curve "
          f"{'identical' if same else 'different'}){extra_info}")
    if abs(got - want) > ct.LOSS_TOL * want:
        failures.append(f"{name}: held-out loss {got:.5f} not within {ct.LOSS_TOL:.0%} of "
                        f"{want:.5f}")
    return failures


CODEC = ["--codec", "int8", "--no-ef"]


def seed():
    fixed = os.environ.get("TERSE_TEST_SEED")
    return int(fixed) if fixed else random.SystemRandom().randrange(1 << 31)


def random_case(args):
    s = seed()
    rng = random.Random(s)
    victim = rng.randrange(WORLD)
    codec = rng.choice([["--codec", "none"], CODEC, ["--codec", "fp16", "--no-ef"]])
    if rng.randrange(2):
        halt, fault = rng.randrange(1, 800), None
        how = f"killed before step {halt}"
    else:
        # Each step sends and receives about four messages of the reduce phase per rank (these
        # small allreduces are recursive doubling, which has no gather phase): 2000 fall well
        # inside the run's 819 steps.
        halt = None
        fault = (f"kill:rank={victim}" + rng.choice(["", ":phase=reduce"]) +
                 rng.choice([":after_sends=", ":after_recvs="]) + str(rng.randrange(2000)))
        how = fault
    print(f"seed {s} (TERSE_TEST_SEED={s} replays it): victim {victim}, {' '.join(codec)}, {how}",
          flush=True)
    return check_case(args, "random", codec, [victim], halt, fault)


def figures(args):
    rng = random.Random(seed())
    times, failures = [], []
    for k in range(args.kills):
        step = rng.randrange(50, 800)
        r = kill_run(args, f"figure-{k}", CODEC, [1 + k % (WORLD - 1)], halt_step=step)
        failures += r["failures"]
        if "kill_to_step" in r:
            times.append(r["kill_to_step"])
            print(f"kill before step {step}: {r['kill_to_step']:.3f} s to the next step, shrink "
                  f"{statistics.median(r['shrink']):.3f} s (median of the survivors)", flush=True)
    if times:
        print(f"kill to next completed step over {len(times)} kills: median "
              f"{statistics.median(times):.3f} s, min {min(times):.3f}, max {max(times):.3f}")
    return failures


# The loss cost of a lost residual: onebit with error feedback, a rank killed between steps.
# The survivors re-lay out their residuals for the new world and go on without the dead rank's
# (its worker residual and its chunk of the server residual are lost); the reference resumes a
# checkpoint of the same step at the smaller world with every rank's residuals re-partitioned
# (nothing lost). The same --hidden 64 as Train.Resume, so the server chunks really move.
ONEBIT = ["--codec", "onebit", "--hidden", "64"]
# OneBitAdam as Train.OneBitAdamResume runs it: its variance freezes after ADAM_WARMUP steps and
# from then on the momentum goes through onebit with error feedback.
ADAM_WARMUP = 300
ADAM = ["--optimizer", "onebit-adam", "--lr", "0.01", "--warmup", str(ADAM_WARMUP), "--codec",
        "onebit", "--hidden", "64"]


def residual_cost(args):
    rng = random.Random(seed())
    costs, failures = [], []
    for k in range(args.kills):
        step, victim = rng.randrange(50, 800), rng.randrange(WORLD)
        name = f"residual-{k}"
        r = kill_run(args, name, ONEBIT, [victim], halt_step=step)
        failures += r["failures"]
        if "run" not in r:
            continue
        ref = reference(args, name, ONEBIT, step, WORLD - 1)
        got, want = held_out(r["run"]), held_out(ref)
        costs.append(got / want - 1)
        print(f"rank {victim} killed before step {step}: held-out loss {got:.5f} with its "
              f"residual lost, {want:.5f} with every residual kept ({costs[-1] * 100:+.3f}%)",
              flush=True)
        if abs(got - want) > ct.LOSS_TOL * want:
            failures.append(f"{name}: held-out loss {got:.5f} not within {ct.LOSS_TOL:.0%} of "
                            f"{want:.5f}")
    if costs:
        print(f"loss cost of a lost residual over {len(costs)} kills: median "
              f"{statistics.median(costs) * 100:+.3f}%, min {min(costs) * 100:+.3f}%, max "
              f"{max(costs) * 100:+.3f}%")
    return failures


CASES = {
    "between": lambda a: check_case(a, "between", CODEC, [1], halt_step=100),
    "rank0": lambda a: check_case(a, "rank0", ["--codec", "none"], [0], halt_step=300),
    "two": lambda a: check_case(a, "two", CODEC, [1, 2], halt_step=200),
    "inside": lambda a: check_case(a, "inside", CODEC, [2],
                                   fault="kill:rank=2:phase=reduce:after_recvs=700"),
    "feedback": lambda a: check_case(a, "feedback", ONEBIT, [3], halt_step=400),
    "adam-warmup": lambda a: check_case(a, "adam-warmup", ADAM, [1], halt_step=150),
    "adam-freeze": lambda a: check_case(a, "adam-freeze", ADAM, [2], halt_step=ADAM_WARMUP + 1),
    "random": random_case,
    "figures": figures,
    "residual-cost": residual_cost,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=sorted(CASES))
    p.add_argument("--terse-run", required=True)
    p.add_argument("--terse-train", required=True)
    p.add_argument("--work", required=True, help="directory for logs, stores and checkpoints")
    p.add_argument("--kills", type=int, default=7, help="figures, residual-cost: how many kills")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    return ct.report(CASES[args.mode](args))


if __name__ == "__main__":
    sys.exit(main())
