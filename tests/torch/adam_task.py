#!/usr/bin/env python3
"""A small character-level transformer trained with Adam on 4 ranks, each on its own kind of
text (non-IID), to show what compression does to Adam and that terse.optim.OneBitAdam fixes it.

Runs (one torchrun of --world ranks, gloo for DDP, terse on loopback), same model, data, steps:
  adamw          torch.optim.AdamW, DDP's own uncompressed allreduce (the baseline)
  hook-onebit    torch.optim.AdamW, terse's DDP hook with onebit and error feedback on gradients
  onebit-adam    terse.optim.OneBitAdam(codec="onebit") attached to DDP
  topk-adam      terse.optim.OneBitAdam(codec="topk:ratio=0.01") attached to DDP (--all)
  hook-SPEC      torch.optim.AdamW, terse's DDP hook with codec SPEC on gradients (error feedback
                 where the codec wants it); --all runs every codec: fp16, bf16, int8, fp8,
                 mxfp8, mxfp4, int4, topk:ratio=0.01 beside onebit

Checks (exit 1 with FAIL on any): OneBitAdam with onebit ends within --tolerance (3.5%) of
AdamW's held-out loss; the gradient hook's onebit with Adam ends more than that above it (so the
check can fail when the optimizer does nothing); every run's weights are bit-identical on all
ranks. The bound is about twice the task's noise floor: terse's exact allreduce (hook-none) ends
up to 1.64% from AdamW over seeds and instruction sets (`noise` mode below; docs/convergence.md,
"Noise floors"), while OneBitAdam ends 9-16% below AdamW and the hook's onebit 3.4-3.7x above.
Prints one line per run: held-out loss, ratio to AdamW, seconds. SKIP (77) without torch.

    python3 tests/torch/adam_task.py drive --work /tmp/adam-task [--steps 300] [--all]

Resume at another world size (`resume` mode): OneBitAdam with onebit trains --steps steps on
--world ranks and saves every rank's torch.save(model, optimizer) at half-way; then three runs
resume that checkpoint and finish the steps: on --world ranks (must end exactly where the
uninterrupted run did), on --world - 1 (each loads its own file; the old server residual
restarts at zero) and on --world + 1 (the new rank loads rank 0's file with
reset_residuals=True). Checked: each resumed optimizer continues at the saved step in the
compressed phase, its ranks end bit-identical, and its held-out loss ends below the
checkpoint's and within --tolerance of the uninterrupted run's (another world size trains on
other batches from there, so it is not the same run). Each rank of a world of W
trains on the topics t with t % W == rank, so every world sees all four.

    python3 tests/torch/adam_task.py resume --work /tmp/adam-resume --world 3 --steps 120 \
        --warmup 30

The noise floor (`noise` mode): the runs --runs (default adamw, hook-none, onebit-adam,
hook-onebit) for --seeds seeds from --seed on each of --isas (default: this CPU's own dispatch,
and torch, MKL and oneDNN held to AVX2), each run's held-out loss over the first's:

    python3 tests/torch/adam_task.py noise --work /tmp/adam-noise --seeds 2

--seed picks another initialisation and batch order, --isa the instruction set of one drive,
--schedule cosine decays the rate (the FSDP2 task's default; this task keeps a constant rate).

With --all, the hook's codecs that keep Adam's second moments (the casts and the 8-bit formats)
are checked to end within the tolerance of AdamW as well; the 4-bit and sparse ones are printed.

The text is generated here (no download): four "topics" of sentences from small grammars, one
per rank; the held-out text mixes all four.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import _testlib  # beside this script

SKIP = _testlib.SKIP
ROOT = _testlib.ROOT

# The port picker of the other torch tests: it draws below the kernel's ephemeral range, where no
# client socket of a concurrent test can take terse's store port between the check and the bind
# (a pair drawn by binding port 0 lies inside that range; CI saw "Address already in use").
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
from ddp_hooks import free_port_pair  # noqa: E402

# ---- text -------------------------------------------------------------------------------------

TOPICS = [
    # animals
    (["the cat", "a dog", "my bird", "the old fox", "a small mouse"],
     ["eats", "sees", "chases", "likes", "finds"],
     ["the fish", "a bone", "some seeds", "the red ball", "a warm bed"],
     ["quickly", "at night", "in the garden", "again"]),
    # kitchen
    (["the cook", "my aunt", "a baker", "the chef"],
     ["bakes", "cuts", "boils", "stirs", "serves"],
     ["fresh bread", "two onions", "the soup", "a lemon cake", "green beans"],
     ["slowly", "for lunch", "with care", "every morning"]),
    # weather
    (["the wind", "cold rain", "the sun", "a storm", "thick fog"],
     ["covers", "hits", "warms", "leaves", "crosses"],
     ["the hills", "the town", "our roof", "the long road", "the harbour"],
     ["today", "in winter", "all week", "before dawn"]),
    # numbers
    (["seven", "twelve", "three", "forty", "nine"],
     ["plus", "times", "minus"],
     ["one", "two", "five", "ten", "eight"],
     ["is a number", "makes more", "makes less"]),
]


def sentence(rng, topic):
    subj, verb, obj, tail = TOPICS[topic]
    words = [rng.choice(subj), rng.choice(verb), rng.choice(obj)]
    if rng.random() < 0.6:
        words.append(rng.choice(tail))
    return " ".join(words) + ". "


def text(seed, topics, chars):
    rng = random.Random(seed)
    out, n = [], 0
    while n < chars:
        s = sentence(rng, rng.choice(topics))
        out.append(s)
        n += len(s)
    return "".join(out)[:chars]


def alphabet():
    chars = set(". ")
    for topic in TOPICS:
        for part in topic:
            for phrase in part:
                chars.update(phrase)
    return sorted(chars)


# ---- model ------------------------------------------------------------------------------------

def make_model(vocab, ctx, d=64, layers=2, heads=4, seed=0):
    import torch
    import torch.nn as nn

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(0.02 * torch.randn(ctx, d))
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)
            self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))

        def forward(self, x):
            t = x.shape[1]
            h = self.emb(x) + self.pos[:t]
            h = self.blocks(h, mask=self.mask[:t, :t])
            return self.head(self.norm(h))

    torch.manual_seed(1234 + seed)
    return TinyLM()


# ---- what the tasks share: seeds, the learning-rate schedule, CPU dispatch -----------------------

def data_seed(args, rank):
    """The seed of rank `rank`'s batch sampler: 7 + rank for --seed 0 (the figures in the docs),
    another draw of batches for every other --seed."""
    return 7 + rank + 1000 * args.seed


def lr_at(args, step):
    """The learning rate of step `step` (0-based): --lr throughout with --schedule constant; with
    cosine, from --lr down to --lr-floor x --lr at --steps along half a cosine, and the floor after
    it. A decayed rate ends every run near a minimum instead of wherever the last steps threw it,
    so two runs whose sums differ only in rounding end close together (docs/convergence.md,
    "Noise floors")."""
    if args.schedule == "constant":
        return args.lr
    t = min(step, args.steps) / max(args.steps, 1)
    return args.lr * (args.lr_floor + (1 - args.lr_floor) * 0.5 * (1 + math.cos(math.pi * t)))


def set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


# How a task's torch runs on a CPU of another kind: torch's own kernels (ATen), MKL's BLAS and
# oneDNN each dispatch on the instruction set, and each picks other kernels (other summation
# orders) on an AVX-512 Xeon, an AVX-512 EPYC and an AVX2-only CPU. `--isa avx2` holds all three
# to AVX2 on this machine, which is how an AVX-512 machine is made to run another CPU's arithmetic.
ISA_ENV = {
    "default": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "ONEDNN_MAX_CPU_ISA": "AVX2"},
}


def add_noise_args(p, schedule, lr_floor=0.1):
    """The options every task takes for its noise floor (docs/convergence.md, "Noise floors")."""
    p.add_argument("--seed", type=int, default=0,
                   help="another model initialisation and batch order (0: the documented run)")
    p.add_argument("--schedule", choices=["constant", "cosine"], default=schedule)
    p.add_argument("--lr-floor", type=float, default=lr_floor,
                   help="cosine: the last step's rate as a fraction of --lr")
    p.add_argument("--isa", choices=sorted(ISA_ENV), default="default",
                   help="the instruction set torch, MKL and oneDNN may use (drive and noise)")
    p.add_argument("--seeds", type=int, default=4, help="noise: seeds per instruction set, from --seed on")
    p.add_argument("--isas", default="default,avx2", help="noise: instruction sets to run")


def noise_args(args):
    """The arguments that carry the noise options from a driver to its ranks."""
    return ["--seed", str(args.seed), "--schedule", args.schedule, "--lr-floor",
            str(args.lr_floor)]


def isa_env(env, isa):
    env.update(ISA_ENV[isa])
    return env


def noise_table(runs, results, reference):
    """Prints each run's held-out loss over the reference's, per (isa, seed) and summed up, and
    returns {run: {"ratios": [...], "min", "max", "mean", "spread"}} (spread: the largest distance
    of a ratio from 1)."""
    print(f"{'isa':<8} {'seed':>4} " + " ".join(f"{r:>20}" for r in runs))
    summary = {r: {"ratios": []} for r in runs}
    for (isa, seed), res in results:
        base = res[reference]["held_out"]
        cells = []
        for r in runs:
            ratio = res[r]["held_out"] / base
            summary[r]["ratios"].append(ratio)
            cells.append(f"{res[r]['held_out']:9.4f} ({ratio:7.4f})")
        print(f"{isa:<8} {seed:>4} " + " ".join(f"{c:>20}" for c in cells))
    for r, s in summary.items():
        x = s["ratios"]
        s.update(min=min(x), max=max(x), mean=sum(x) / len(x), spread=max(abs(v - 1) for v in x))
        print(f"{r}: ratio to {reference} min {s['min']:.4f} mean {s['mean']:.4f} max "
              f"{s['max']:.4f}, spread {s['spread']:.4f} over {len(x)} runs")
    return summary


# ---- one rank ---------------------------------------------------------------------------------

# The gradient hook's other codecs (--all), and those expected to leave Adam as it is: they keep
# every gradient's magnitude to within a few percent, so Adam's second moments see the real ones.
ALL_HOOK_CODECS = ["fp16", "bf16", "int8", "fp8", "mxfp8", "mxfp4", "int4", "topk:ratio=0.01"]
CLOSE_TO_ADAMW = {"hook-fp16", "hook-bf16", "hook-int8", "hook-fp8", "hook-mxfp8"}


def rank_text(rank, topics, ctx):
    """This rank's training text on `topics` as character indices, and the held-out loss (the
    text of every topic, in sequences of ctx + 1) of a model."""
    import torch
    import torch.nn.functional as F

    chars = alphabet()
    index = {c: i for i, c in enumerate(chars)}
    mine = torch.tensor([index[c] for c in text(100 + rank, topics, 200_000)])
    held = torch.tensor([index[c] for c in text(999, list(range(len(TOPICS))), 40_000)])
    held = held[: (len(held) // (ctx + 1)) * (ctx + 1)].view(-1, ctx + 1)

    def held_out_loss(model):
        with torch.no_grad():
            logits = model(held[:, :-1])
            return F.cross_entropy(logits.reshape(-1, len(chars)), held[:, 1:].reshape(-1)).item()
    return mine, held_out_loss


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import terse.ddp
    import terse.optim

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    chars = alphabet()
    ctx, batch = args.ctx, args.batch
    mine, held_out_loss = rank_text(rank, [rank % len(TOPICS)], ctx)

    runs = args.runs.split(",") if args.runs else ["adamw", "hook-onebit", "onebit-adam"]
    if args.all:
        runs += ["topk-adam"] + ["hook-" + spec for spec in ALL_HOOK_CODECS]
    results = {}
    for name in runs:
        net = make_model(len(chars), ctx, seed=args.seed)
        model = DDP(net)
        if name == "adamw" or name.startswith("hook-"):
            opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
            if name.startswith("hook-"):
                terse.ddp.register(model, name[len("hook-"):])
        else:
            codec = "onebit" if name == "onebit-adam" else "topk:ratio=0.01"
            opt = terse.optim.OneBitAdam(model.parameters(), lr=args.lr, weight_decay=0.01,
                                         codec=codec, warmup_steps=args.warmup)
            opt.attach(model)
        gen = torch.Generator().manual_seed(data_seed(args, rank))
        dist.barrier()
        start = time.time()
        for step in range(args.steps):
            at = torch.randint(0, len(mine) - ctx - 1, (batch,), generator=gen)
            seq = torch.stack([mine[a:a + ctx + 1] for a in at.tolist()])
            logits = model(seq[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, len(chars)), seq[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            set_lr(opt, lr_at(args, step))
            opt.step()
        seconds = time.time() - start
        flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        identical = all(torch.equal(g, gathered[0]) for g in gathered)
        results[name] = {"held_out": held_out_loss(net), "train_last": loss.item(),
                         "identical": identical, "seconds": seconds,
                         "frozen_at": getattr(opt, "frozen_at", None)}
        if rank == 0:
            print(f"rank 0: {name}: held-out {results[name]['held_out']:.4f} "
                  f"({seconds:.1f} s)", flush=True)
    _testlib.finish_worker(rank, os.path.join(args.work, "results.json"), results, indent=1)


def resume_worker(args):
    """One rank of the resume mode: --phase save trains and checkpoints at half-way, --phase
    load resumes that checkpoint at this world size. Rank 0 writes <phase>-<world>.json."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import terse.ddp
    import terse.optim

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    chars = alphabet()
    ctx, batch = args.ctx, args.batch
    mine, held_out_loss = rank_text(rank, [t for t in range(len(TOPICS)) if t % world == rank],
                                    ctx)

    half = args.steps // 2
    net = make_model(len(chars), ctx, seed=args.seed)
    model = DDP(net)
    opt = terse.optim.OneBitAdam(model.parameters(), lr=args.lr, weight_decay=0.01,
                                 codec="onebit", warmup_steps=args.warmup)
    opt.attach(model)
    result = {"world": world}
    first = 0
    if args.phase == "load":
        own = os.path.join(args.work, f"ckpt-{rank}.pt")
        saved = torch.load(own if os.path.exists(own) else os.path.join(args.work, "ckpt-0.pt"))
        net.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"], reset_residuals=not os.path.exists(own))
        result.update(loaded_steps=opt.steps, loaded_frozen_at=opt.frozen_at,
                      saved_world=saved["opt"]["terse"]["world_size"])
        first = half
    gen = torch.Generator().manual_seed(data_seed(args, rank))
    dist.barrier()
    for step in range(args.steps):
        at = torch.randint(0, len(mine) - ctx - 1, (batch,), generator=gen)
        if step < first:
            continue  # the batches the checkpoint has seen: drawn, so the rest are the same
        seq = torch.stack([mine[a:a + ctx + 1] for a in at.tolist()])
        loss = F.cross_entropy(model(seq[:, :-1]).reshape(-1, len(chars)),
                               seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        set_lr(opt, lr_at(args, step))
        opt.step()
        if args.phase == "save" and step + 1 == half:
            torch.save({"model": net.state_dict(), "opt": opt.state_dict()},
                       os.path.join(args.work, f"ckpt-{rank}.pt"))
            result["held_out_at_checkpoint"] = held_out_loss(net)
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    result.update(held_out=held_out_loss(net), steps=opt.steps, frozen_at=opt.frozen_at,
                  identical=all(torch.equal(g, gathered[0]) for g in gathered))
    _testlib.finish_worker(rank, os.path.join(args.work, f"{args.phase}-{world}.json"), result,
                           indent=1)


# ---- the driver -------------------------------------------------------------------------------

def require_torch():
    _testlib.require_torch(_testlib.DEBIAN_HINT, gloo=True)


def launch(args, world, worker_args):
    """torchrun of `world` ranks of this script with worker_args; exits with FAIL if they do."""
    env = isa_env(_testlib.torchrun_env(), args.isa)
    _testlib.torchrun(
        __file__, world, free_port_pair(),
        os.path.join(args.work, f"logs-{worker_args[0]}-{world}"),
        worker_args + ["--work", args.work, "--steps", str(args.steps), "--warmup",
                       str(args.warmup), "--lr", str(args.lr), "--ctx", str(args.ctx),
                       "--batch", str(args.batch)] + noise_args(args),
        env, args.timeout)


def run_worker(args, runs=None):
    """One torchrun of the worker; its results.json."""
    result_file = os.path.join(args.work, "results.json")
    if os.path.exists(result_file):
        os.remove(result_file)
    launch(args, args.world, ["worker"] + (["--all"] if args.all else []) +
           (["--runs", runs] if runs else []))
    with open(result_file) as f:
        return json.load(f)


def noise(args):
    """The task's noise floor: the lossless run (the hook with codec none: terse's exact
    allreduce, summed in another order than DDP's gloo) and the checked runs against AdamW, over
    --seeds seeds on each of --isas (docs/convergence.md, "Noise floors")."""
    require_torch()
    runs = (args.runs or "adamw,hook-none,onebit-adam,hook-onebit").split(",")
    _testlib.noise_floor(args, runs, run_worker,
                         lambda results: noise_table(runs[1:], results, runs[0]))


def drive(args):
    require_torch()
    os.makedirs(args.work, exist_ok=True)
    results = run_worker(args, args.runs)
    base = results["adamw"]["held_out"]
    failures = []
    print(f"{'run':<12} {'held-out':>9} {'vs adamw':>9} {'train':>7} {'seconds':>8}  frozen_at")
    for name, r in results.items():
        print(f"{name:<12} {r['held_out']:9.4f} {r['held_out'] / base:9.3f} "
              f"{r['train_last']:7.3f} {r['seconds']:8.1f}  {r['frozen_at']}")
        if not r["identical"]:
            failures.append(f"{name}: the ranks' weights differ")
    limit = base * (1 + args.tolerance)
    if results["onebit-adam"]["held_out"] > limit:
        failures.append(f"OneBitAdam with onebit ends at {results['onebit-adam']['held_out']:.4f}, "
                        f"more than {args.tolerance:.1%} above AdamW's {base:.4f}")
    if results["hook-onebit"]["held_out"] <= limit:
        failures.append(f"the gradient hook's onebit with AdamW ends at "
                        f"{results['hook-onebit']['held_out']:.4f}, within {args.tolerance:.1%} of "
                        f"AdamW's {base:.4f}: this task no longer shows the problem OneBitAdam "
                        f"solves, so it cannot tell whether the optimizer works")
    for name in CLOSE_TO_ADAMW & set(results):
        if results[name]["held_out"] > limit:
            failures.append(f"{name} with AdamW ends at {results[name]['held_out']:.4f}, more "
                            f"than {args.tolerance:.1%} above AdamW's {base:.4f}")
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print("OK: OneBitAdam with onebit within "
          f"{args.tolerance:.1%} of AdamW, the gradient hook's onebit worse, ranks bit-identical")


def resume(args):
    require_torch()
    os.makedirs(args.work, exist_ok=True)
    for name in os.listdir(args.work):
        if name.endswith(".json") or name.startswith("ckpt-"):
            os.remove(os.path.join(args.work, name))
    launch(args, args.world, ["resume-worker", "--phase", "save"])
    worlds = (args.world, args.world - 1, args.world + 1)
    for world in worlds:
        launch(args, world, ["resume-worker", "--phase", "load"])

    def read(name):
        with open(os.path.join(args.work, name)) as f:
            return json.load(f)

    saved = read(f"save-{args.world}.json")
    base, at_ckpt = saved["held_out"], saved["held_out_at_checkpoint"]
    print(f"uninterrupted on {args.world} ranks: held-out {at_ckpt:.4f} at step "
          f"{args.steps // 2}, {base:.4f} at step {args.steps} (frozen at {saved['frozen_at']})")
    failures = [] if saved["identical"] else [f"{args.world} ranks: the weights differ"]
    for world in worlds:
        r = read(f"load-{world}.json")
        print(f"resumed on {world} ranks: held-out {r['held_out']:.4f} ({r['held_out'] / base:.3f}x"
              f" uninterrupted); loaded step {r['loaded_steps']}, frozen at "
              f"{r['loaded_frozen_at']}, saved by {r['saved_world']} ranks")
        if r["loaded_steps"] != args.steps // 2 or r["steps"] != args.steps:
            failures.append(f"{world} ranks: loaded at step {r['loaded_steps']}, ended at "
                            f"{r['steps']}")
        if r["loaded_frozen_at"] != saved["frozen_at"] or r["saved_world"] != args.world:
            failures.append(f"{world} ranks: the checkpoint's phase or world was not carried")
        if not r["identical"]:
            failures.append(f"{world} ranks: the weights differ after resuming")
        if not r["held_out"] < at_ckpt:
            failures.append(f"{world} ranks: held-out {r['held_out']:.4f} did not improve on "
                            f"the checkpoint's {at_ckpt:.4f}")
        if world == args.world and r["held_out"] != base:
            failures.append(f"resumed on the saving world size, held-out {r['held_out']!r} is "
                            f"not the uninterrupted run's {base!r}")
        if r["held_out"] > base * (1 + args.tolerance):
            failures.append(f"{world} ranks: held-out {r['held_out']:.4f} more than "
                            f"{args.tolerance:.1%} above the uninterrupted {base:.4f}")
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    print(f"OK: OneBitAdam resumed {args.world} ranks' checkpoint on {args.world} ranks exactly, "
          f"on {args.world - 1} and {args.world + 1} within {args.tolerance:.1%} of the "
          f"uninterrupted run")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["drive", "worker", "resume", "resume-worker", "noise"])
    p.add_argument("--phase", choices=["save", "load"], help="resume-worker only")
    p.add_argument("--work", required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tolerance", type=float, default=0.035,
                   help="relative bound on the held-out loss against AdamW: about twice the "
                   "task's noise floor (docs/convergence.md, 'Noise floors')")
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--all", action="store_true",
                   help="also OneBitAdam with topk and the hook with every other codec")
    p.add_argument("--runs", default="", help="the runs, comma-separated (default: the checked "
                   "three; hook-none is terse's exact allreduce)")
    add_noise_args(p, "constant")
    args = p.parse_args()
    {"drive": drive, "worker": worker, "resume": resume,
     "resume-worker": resume_worker, "noise": noise}[args.mode](args)


if __name__ == "__main__":
    main()
