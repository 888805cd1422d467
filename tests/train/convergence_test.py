#!/usr/bin/env python3
"""Convergence and resume tests of terse-train (examples/train) under terse-run.

  convergence: trains the MLP with 4 ranks to a fixed step budget with every codec, with and
               without error feedback, and checks that each compressing codec with error
               feedback ends within LOSS_TOL (relative) of the uncompressed final training loss
               and within ACC_TOL of its test accuracy, while onebit and topk without error
               feedback end measurably worse. The low-bit codecs: fp8 and mxfp8 without error
               feedback within FP8_TOL of none's loss; mxfp4 and int4 with error feedback within
               LOSS_TOL. mxfp4 and int4 without error feedback end within LOSS_TOL of none
               on this data as well (printed, not checked: INFO_ONLY); on features of unequal
               scale (SPREAD) the 4-bit codecs with error feedback end within LOSS_TOL of none
               and without it measurably worse.
  adam:        AdamW (uncompressed), AdamW on onebit-compressed gradients with error feedback,
               and OneBitAdam with onebit on the momentum (--optimizer onebit-adam), 4 ranks
               non-IID: OneBitAdam ends within LOSS_TOL of AdamW's final loss and ACC_TOL of its
               accuracy, the compressed gradients with AdamW measurably worse (docs/optim.md).
  resume:      a run stopped mid-epoch and resumed from its checkpoint at the same world size
               reproduces the uninterrupted run's loss curve exactly; resumed at another world
               size (residuals re-partitioned) it ends within the same tolerances.

The JSON logs stay in --work (scripts/plot_convergence.py plots them). Standard library only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

LOSS_TOL = 0.02  # relative, on the final full-training-set loss
FP8_TOL = 0.01   # relative: the 8-bit floats without error feedback (issue #20)
ACC_TOL = 0.01   # absolute, on the final test accuracy (1 point)
WORLD = 4
# Small enough for a few minutes on two loaded cores, long enough for the codecs to settle.
# (terse-train's defaults: 2,410-parameter MLP, 32,768 rows, 8 epochs of 256 steps, momentum 0.8.)
COMMON = ["--quiet"]
# The resume test uses terse-train's defaults but a 64-wide hidden layer (4,810 parameters), so
# that allreduce's 2048-aligned chunks differ between 4 ranks ([0,2048) [2048,4096) [4096,4810) and
# an empty one) and 2 ranks ([0,4096) [4096,4810)): the server residuals really are re-partitioned.
RESUME = ["--hidden", "64"]
RUN_TIMEOUT_S = 300

# (label, codec, error feedback)
CODECS = [
    ("none", "none", False),
    ("fp16", "fp16", True),
    ("bf16", "bf16", True),
    ("int8", "int8", True),
    ("onebit", "onebit", True),
    ("topk1%", "topk:ratio=0.01", True),
    ("onebit-noef", "onebit", False),
    ("topk1%-noef", "topk:ratio=0.01", False),
    ("fp8", "fp8", False),
    ("mxfp8", "mxfp8", False),
    ("mxfp4", "mxfp4", True),
    ("int4", "int4", True),
    ("mxfp4-noef", "mxfp4", False),
    ("int4-noef", "int4", False),
]
# Printed for comparison, not checked. Issue #20 expected the 4-bit codecs to be measurably worse
# without error feedback; on this MLP they are not (2026-11-25, 4 ranks: mxfp4 +1.01% and int4
# +0.18% over none's loss on the iid split, +0.41% / +0.60% on --split noniid; with error
# feedback +0.17% / +0.10% and +0.04% / +0.02%), so there is nothing honest to assert.
INFO_ONLY = {"mxfp4-noef", "int4-noef"}
# The 4-bit codecs round the values of a block below 1/14 (int4) or 1/32 to 1/16 (mxfp4, whose
# scale is a power of two) of its largest to zero. With every feature on one scale a gradient
# block holds no such values for long; with features spanning three decades (--feature-spread 1000, as unnormalized inputs do)
# the small features' weight gradients sit next to the large ones' in every block, and without
# error feedback they are lost at every step (2026-11-26, 4 ranks: mxfp4 +2.79% and int4 +8.6%
# over none's loss without error feedback, +0.01% and +0.02% with it).
SPREAD = ["--feature-spread", "1000"]
SPREAD_CODECS = [
    ("none", "none", True),
    ("mxfp4", "mxfp4", True),
    ("int4", "int4", True),
    ("mxfp4-noef", "mxfp4", False),
    ("int4-noef", "int4", False),
]
# Codecs expected close to none without error feedback, and their relative loss tolerance.
CLOSE_WITHOUT_EF = {"fp16": LOSS_TOL, "bf16": LOSS_TOL, "int8": LOSS_TOL, "fp8": FP8_TOL,
                    "mxfp8": FP8_TOL}


def train(args, world, log, extra, env_extra=None):
    cmd = [args.terse_run, "-n", str(world), "--", args.terse_train] + COMMON + extra + ["--log", log]
    env = dict(os.environ)
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.update(env_extra or {})
    print("+", " ".join(cmd), flush=True)
    try:
        done = subprocess.run(cmd, env=env, timeout=RUN_TIMEOUT_S, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: {' '.join(cmd)} did not finish in {RUN_TIMEOUT_S} s")
    if done.returncode != 0:
        print(done.stdout)
        sys.exit(f"FAIL: {' '.join(cmd)} exited with {done.returncode}")
    with open(log) as f:
        return json.load(f)


def final(run):
    last = run["epochs"][-1]
    return last["train_loss"], last["test_acc"]


def compare(title, results, codecs, info_only):
    """Prints results (label -> (loss, accuracy)) against results["none"] and returns what
    fails: codecs with error feedback (or in CLOSE_WITHOUT_EF) must end close to none, the
    others measurably worse than none and than the same codec with error feedback."""
    base_loss, base_acc = results["none"]
    failures = []
    print(f"\n{title}\n{'codec':<14}{'train loss':>12}{'vs none':>10}{'test acc':>10}{'vs none':>10}")
    for label, (loss, acc) in results.items():
        print(f"{label:<14}{loss:>12.5f}{(loss / base_loss - 1) * 100:>+9.2f}%"
              f"{acc * 100:>9.2f}%{(acc - base_acc) * 100:>+9.2f}")
    for label, _, ef in codecs:
        loss, acc = results[label]
        if label == "none" or label in info_only:
            continue
        if ef or label in CLOSE_WITHOUT_EF:
            tol = LOSS_TOL if ef else CLOSE_WITHOUT_EF[label]
            if abs(loss - base_loss) > tol * base_loss:
                failures.append(f"{title}: {label}: final loss {loss:.5f} is not within {tol:.0%} "
                                f"of none's {base_loss:.5f}")
            if abs(acc - base_acc) > ACC_TOL:
                failures.append(f"{title}: {label}: test accuracy {acc:.4f} is not within "
                                f"{ACC_TOL} of none's {base_acc:.4f}")
        else:
            with_ef = results[label.replace("-noef", "")][0]
            # Measurably worse: beyond the tolerance the error-feedback runs must meet, and worse
            # than the same codec with error feedback.
            if not (loss > base_loss * (1 + LOSS_TOL) and loss > with_ef * (1 + LOSS_TOL)):
                failures.append(f"{title}: {label}: final loss {loss:.5f} without error feedback "
                                f"is not measurably worse than none ({base_loss:.5f}) and the "
                                f"same codec with error feedback ({with_ef:.5f})")
    return failures


def convergence(args):
    def run_all(codecs, data, subdir):
        # Each data set's logs in a directory of their own: scripts/plot_convergence.py plots
        # and tabulates every log of the directory it is given.
        work = os.path.join(args.work, subdir)
        os.makedirs(work, exist_ok=True)
        results = {}
        for label, codec, ef in codecs:
            extra = ["--codec", codec] + ([] if ef else ["--no-ef"])
            log = os.path.join(work, f"{args.model}-{args.split}-{label}.json")
            results[label] = final(train(args, WORLD, log,
                                         ["--model", args.model, "--split", args.split] + data + extra))
        return results

    results = run_all(CODECS, [], "")  # the work directory itself, as before
    failures = compare(f"{args.model}, {args.split}", results, CODECS, INFO_ONLY)
    spread = {}
    if (args.model, args.split) == ("mlp", "iid"):  # where SPREAD's figures were made
        spread = run_all(SPREAD_CODECS, SPREAD, "spread")
        failures += compare(f"{args.model}, {args.split}, {' '.join(SPREAD)}", spread,
                            SPREAD_CODECS, set())
    with open(os.path.join(args.work, f"summary-{args.model}-{args.split}.json"), "w") as f:
        json.dump({k: {"train_loss": v[0], "test_acc": v[1]} for k, v in results.items()} |
                  {f"spread-{k}": {"train_loss": v[0], "test_acc": v[1]} for k, v in spread.items()},
                  f, indent=1)
    return failures


# The Adam runs: Adam's usual learning rate for this model, and a warm-up of 300 of the 2,048
# steps (15%, the low end of the 1-bit Adam paper's range).
ADAM = ["--lr", "0.01", "--split", "noniid"]
ADAM_RUNS = [
    ("adamw", ["--optimizer", "adamw", "--codec", "none"]),
    ("adamw-onebit-grads", ["--optimizer", "adamw", "--codec", "onebit"]),
    ("onebit-adam", ["--optimizer", "onebit-adam", "--codec", "onebit", "--warmup", "300"]),
]


def adam(args):
    results = {}
    for label, extra in ADAM_RUNS:
        run = train(args, WORLD, os.path.join(args.work, f"adam-{label}.json"), ADAM + extra)
        results[label] = final(run)
    base_loss, base_acc = results["adamw"]
    print(f"\n{'run':<20}{'train loss':>12}{'vs adamw':>10}{'test acc':>10}")
    for label, (loss, acc) in results.items():
        print(f"{label:<20}{loss:>12.5f}{(loss / base_loss - 1) * 100:>+9.2f}%{acc * 100:>9.2f}%")
    failures = []
    loss, acc = results["onebit-adam"]
    if loss > base_loss * (1 + LOSS_TOL) or acc < base_acc - ACC_TOL:
        failures.append(f"onebit-adam: final loss {loss:.5f} / accuracy {acc:.4f} not within "
                        f"{LOSS_TOL:.0%} / {ACC_TOL} of AdamW's {base_loss:.5f} / {base_acc:.4f}")
    grads = results["adamw-onebit-grads"][0]
    if not (grads > base_loss * (1 + LOSS_TOL) and grads > loss):
        failures.append(f"AdamW on onebit gradients ends at {grads:.5f}, not measurably worse than "
                        f"AdamW ({base_loss:.5f}) and OneBitAdam ({loss:.5f}): the test no longer "
                        f"shows what OneBitAdam is for")
    return failures


def resume(args):
    failures = []
    codec = RESUME + ["--codec", args.resume_codec] + args.resume_extra.split()
    full = train(args, WORLD, os.path.join(args.work, "full.json"), codec)
    per_epoch = full["total_steps"] // len(full["epochs"])
    stop = per_epoch + per_epoch // 2  # mid-epoch: the data position must be restored too
    ckpt = os.path.join(args.work, "ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    train(args, WORLD, os.path.join(args.work, "first-half.json"),
          codec + ["--checkpoint", ckpt, "--stop-at", str(stop)])
    same = train(args, WORLD, os.path.join(args.work, "resumed-4.json"), codec + ["--resume", ckpt])
    want = [s for s in full["steps"] if s[0] > stop]
    if same["start_step"] != stop or same["steps"] != want or same["epochs"] != [
            e for e in full["epochs"] if e["step"] > stop]:
        diff = next(((a, b) for a, b in zip(same["steps"] + [None] * len(want), want) if a != b),
                    (same["start_step"], stop))
        failures.append(f"resumed at the same world size, the curve differs from the "
                        f"uninterrupted run (first difference: got {diff[0]}, want {diff[1]})")
    else:
        print(f"resume at {WORLD} ranks: {len(want)} steps identical to the uninterrupted run")
    other = 2
    moved = train(args, other, os.path.join(args.work, f"resumed-{other}.json"),
                  codec + ["--resume", ckpt])
    loss, acc = final(moved)
    base_loss, base_acc = final(full)
    print(f"resume at {other} ranks: final loss {loss:.5f} (uninterrupted {base_loss:.5f}), "
          f"test accuracy {acc:.4f} (uninterrupted {base_acc:.4f})")
    if abs(loss - base_loss) > LOSS_TOL * base_loss or abs(acc - base_acc) > ACC_TOL:
        failures.append(f"resumed at {other} ranks: final loss {loss:.5f} / accuracy {acc:.4f} "
                        f"not within tolerance of {base_loss:.5f} / {base_acc:.4f}")
    for a, b in zip(moved["epochs"], [e for e in full["epochs"] if e["step"] > stop]):
        if abs(a["train_loss"] - b["train_loss"]) > LOSS_TOL * b["train_loss"]:
            failures.append(f"resumed at {other} ranks: epoch {a['epoch']} loss {a['train_loss']:.5f}"
                            f" vs {b['train_loss']:.5f} uninterrupted")
    return failures


# The noise floor of these tasks (docs/convergence.md, "Noise floors"): the same exact run with its
# sums in another order (TERSE_SMALL_BYTES=0: the ring instead of recursive doubling for these
# small models) is the smallest perturbation a training run can meet, and how far it moves the
# final loss is what no codec bound can be tighter than. Measured beside the nearest codecs, over
# seeds. terse-train's arithmetic is terse's own loops (no BLAS; terse's AVX2 kernels are held
# bitwise to the portable ones by the codec tests), so another CPU runs the same bits.
NOISE_RUNS = [
    # (label, reference label, arguments, environment)
    ("none", None, ["--codec", "none"], {}),
    ("none-ring", "none", ["--codec", "none"], {"TERSE_SMALL_BYTES": "0"}),
    ("fp16", "none", ["--codec", "fp16"], {}),
    ("int8", "none", ["--codec", "int8"], {}),
    ("adamw", None, ADAM + ["--optimizer", "adamw", "--codec", "none"], {}),
    ("adamw-ring", "adamw", ADAM + ["--optimizer", "adamw", "--codec", "none"],
     {"TERSE_SMALL_BYTES": "0"}),
    ("onebit-adam", "adamw", ADAM + ADAM_RUNS[2][1], {}),
]


def noise(args):
    ratios = {label: [] for label, ref, _, _ in NOISE_RUNS if ref}
    for seed in range(1, args.seeds + 1):
        final_loss = {}
        for label, ref, extra, env in NOISE_RUNS:
            run = train(args, WORLD, os.path.join(args.work, f"noise-{label}-{seed}.json"),
                        extra + ["--seed", str(seed)], env)
            final_loss[label] = final(run)[0]
            if ref:
                ratios[label].append(final_loss[label] / final_loss[ref])
        print(f"seed {seed}: " + ", ".join(f"{k} {v:.5f}" for k, v in final_loss.items()),
              flush=True)
    for label, x in ratios.items():
        print(f"{label}: final loss over its reference, min {min(x):.5f} max {max(x):.5f}, "
              f"spread {max(abs(v - 1) for v in x):.5f} over {len(x)} seeds")
    with open(os.path.join(args.work, "noise.json"), "w") as f:
        json.dump(ratios, f, indent=1)
    return []


def report(failures):
    """Prints each failure and the verdict; the driver's exit status (shrink_test.py too)."""
    for f in failures:
        print("FAIL:", f)
    print("PASS" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["convergence", "resume", "adam", "noise"])
    p.add_argument("--terse-run", required=True)
    p.add_argument("--terse-train", required=True)
    p.add_argument("--work", required=True, help="directory for logs and checkpoints")
    p.add_argument("--resume-codec", default="topk:ratio=0.01")
    p.add_argument("--resume-extra", default="",
                   help="more terse-train options of the resume runs, e.g. the optimizer's")
    p.add_argument("--model", default="mlp", choices=["mlp", "softmax"],
                   help="model of the convergence runs")
    p.add_argument("--split", default="iid", choices=["iid", "noniid"],
                   help="data split of the convergence runs")
    p.add_argument("--seeds", type=int, default=4, help="noise: seeds 1..N")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    return report({"convergence": convergence, "resume": resume, "adam": adam,
                   "noise": noise}[args.mode](args))


if __name__ == "__main__":
    sys.exit(main())
