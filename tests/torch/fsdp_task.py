#!/usr/bin/env python3
"""terse.fsdp under FSDP2: adam_task.py's character-level transformer, 4 non-IID ranks, AdamW,
every encoder layer and the root a ``fully_shard`` unit on a CPU mesh over gloo.

Runs (one torchrun of --world ranks; same model, data, seeds and steps for each):
  fsdp          FSDP2's own reduce-scatter and all-gather over gloo (the baseline)
  none          terse.fsdp, gradients and weights exact (codec none)
  int8          gradients reduce-scattered with int8, weights exact
  mxfp8         gradients with mxfp8, weights exact
  int8-w8       gradients int8, weights all-gathered with int8 (qwZ-style)
  bf16-int8     bf16 parameters, float32 reduction (MixedPrecisionPolicy), gradients int8
  onebit-ef     gradients onebit with error feedback per unit (printed; AdamW does not train
                well on onebit gradients, docs/pytorch.md)
  broken        int8 with the reduce-scatter's result negated: compression broken on purpose
  sharded-onebit       terse.sharded_optim.FSDPShardedOneBitAdam (warm-up 30) in place of
                       AdamW, taking over the reduce-scatter: onebit, error feedback, local momentum
  sharded-int8         the same with int8, no error feedback
  sharded-onebit-noef  onebit without error feedback: compression broken, must miss the bound

The rate decays along half a cosine from --lr to a tenth of it (--schedule cosine, the default):
at a constant rate the end of a run is wherever its last steps threw it, and the exact runs
landed 0.5% (Xeon) and 1.1% (EPYC) from FSDP2's, codecs up to 2.5% apart between the two CPUs;
decayed, none ends within 0.012% of FSDP2 over 3 seeds x 2 instruction sets, the codecs within
0.1% (the noise floor: `noise` mode, docs/convergence.md "Noise floors").

Checks (exit 1 with FAIL on any): first the comms alone, as FSDP2 calls them (comm_checks:
AVG, SUM and PREMUL_SUM exact, the in-place all-gather exact, bad groups, dtypes and weight
codecs refused with terse.fsdp's message); then none, int8, mxfp8 and bf16-int8 end within
--tolerance (1%) of fsdp's held-out loss, int8-w8 within --weight-tolerance (5%), and broken does
not (so the bound can fail); every
terse run used terse's comms on every unit; int8's weights differ from none's (the codec ran);
on every rank the full (gathered) weights and every all-gather's output are bit-identical;
onebit-ef's residuals take 4 bytes per parameter of each unit (and its checkpoints hold no
server residual), and its
checkpoint (FSDP's state_dict, the optimizer's, terse.fsdp's residuals, torch.save/load with
weights_only) resumed for 5 steps repeats the continued run bit for bit on every rank, while the
same resume with zeroed residuals does not. sharded-onebit ends within --sharded-tolerance (2%)
of fsdp's held-out loss, and sharded-onebit-noef at least --ef-gain (0.5%) above sharded-onebit
(what error feedback buys, measured 0.9-2.3%); sharded-int8 keeps under 0.3x OneBitAdam's
optimizer state; sharded-onebit's checkpoint (every rank's, combine()d) resumes bit for bit at 4
ranks, and at 2 ranks (resume mode, its state re-laid out for FSDP2's 2-rank padding) follows the
4 ranks' continuation on the same global batches within --resume-tolerance (2%) above; that
checkpoint is taken half-way, where the rate is still 0.55 of --lr, and the run goes on from it.
SKIP (77) without a torch that has FSDP2's custom comms (2.8 or later).

    python3 tests/torch/fsdp_task.py drive --work /tmp/fsdp-task [--steps 120] [--isa avx2]
    python3 tests/torch/fsdp_task.py noise --work /tmp/fsdp-noise --seeds 3 \
        --runs fsdp,none,int8,mxfp8,sharded-onebit,sharded-onebit-noef
"""
import argparse
import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _testlib  # noqa: E402
import adam_task  # noqa: E402  (the text, the model, the port picker)

SKIP = _testlib.SKIP
RESUME = 5   # steps after the checkpoint in onebit-ef's resume check
RUNS = ["fsdp", "none", "int8", "mxfp8", "int8-w8", "bf16-int8", "onebit-ef", "broken",
        "sharded-onebit", "sharded-int8", "sharded-onebit-noef"]
WITHIN = {"none", "int8", "mxfp8", "bf16-int8", "sharded-int8"}
# terse.sharded_optim.FSDPShardedOneBitAdam (the optimizer takes over the reduce-scatter): onebit
# with error feedback and local momentum, bounded at --sharded-tolerance (2%) as the issue asks.
# (codec, error feedback, local momentum). sharded-onebit-noef is compression broken (onebit
# without error feedback): it must miss that bound. sharded-onebit-grad (onebit + error feedback
# sending gradients, local_momentum=False) is not in the default runs; docs/optim.md has its figure.
SHARDED = {"sharded-onebit": ("onebit", True, True), "sharded-int8": ("int8", False, False),
           "sharded-onebit-noef": ("onebit", False, False),
           "sharded-onebit-grad": ("onebit", True, False)}
SHARDED_BROKEN = {"sharded-onebit-noef"}
SHARDED_WARMUP = 30   # --sharded-warmup
# sharded-onebit's checkpoint is taken half-way, where the decaying rate is still 0.55 of --lr, so
# the exact-resume check runs where the optimizer's state moves the weights most (at the last
# step's tenth of the rate it hardly does), and the run then goes on from the reloaded checkpoint.
# After it: CONTINUE steps on every topic's data at once (the same global batch at any world
# size) at the checkpoint's rate, the held-out loss every CONTINUE_EVERY, at 4 ranks and resumed
# at 2.
CONTINUE, CONTINUE_EVERY, RESUME_WORLD = 20, 5, 2


def continuation_texts(world, rank, ctx):
    """The topics rank `rank` of `world` trains on after the checkpoint, each with the text the
    4-rank run's rank of that topic had: over the ranks, every topic once."""
    return [(t, adam_task.rank_text(t, [t], ctx)[0])
            for t in range(rank, len(adam_task.TOPICS), world)]


def continue_training(model, opt, texts, args, n_chars, held_out):
    """CONTINUE steps, each on `args.batch` sequences of every topic in `texts` (the same global
    batch whatever the world size), at the rate of the half-way checkpoint; the held-out loss
    every CONTINUE_EVERY steps."""
    import torch
    import torch.nn.functional as F
    curve = []
    adam_task.set_lr(opt, adam_task.lr_at(args, args.steps // 2))
    for s in range(1, CONTINUE + 1):
        seqs = []
        for t, txt in texts:
            g = torch.Generator().manual_seed(5000 + 10 * s + t)
            at = torch.randint(0, len(txt) - args.ctx - 1, (args.batch,), generator=g)
            seqs += [txt[a:a + args.ctx + 1] for a in at.tolist()]
        seq = torch.stack(seqs)
        loss = F.cross_entropy(model(seq[:, :-1]).float().reshape(-1, n_chars),
                               seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if s % CONTINUE_EVERY == 0:
            curve.append(held_out(model))
    return curve
# Weights all-gathered with int8 change every forward and backward, not only the gradients'
# average: checked against the looser --weight-tolerance (2.8% above the baseline when measured
# on 2026-11-28, docs/pytorch.md).
WEIGHTS = {"int8-w8"}
CODECS = {"none": ("none", "none"), "int8": ("int8", "none"), "mxfp8": ("mxfp8", "none"),
          "int8-w8": ("int8", "int8"), "bf16-int8": ("int8", "none"),
          "onebit-ef": ("onebit", "none"), "broken": ("int8", "none"),
          "sharded-onebit": ("none", "none"), "sharded-int8": ("none", "none"),
          "sharded-onebit-noef": ("none", "none"), "sharded-onebit-grad": ("none", "none")}


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    import terse.ddp
    import terse.fsdp
    from terse.sharded_optim import FSDPShardedOneBitAdam, combine

    class Broken(terse.fsdp.TerseReduceScatter):
        """int8, with the reduced gradient's sign flipped: what a broken codec could do."""

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            super().__call__(output_tensor, input_tensor, group, op, async_op)
            output_tensor.neg_()

    class Recording(terse.fsdp.TerseAllGather):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.digest = hashlib.sha256()

        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            work = super().__call__(output_tensor, input_tensor, group, async_op)
            self.digest.update(output_tensor.detach().view(torch.uint8).numpy().tobytes())
            return work

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    chars = adam_task.alphabet()
    ctx, batch = args.ctx, args.batch
    mine, held_out_loss = adam_task.rank_text(rank, [rank % len(adam_task.TOPICS)], ctx)

    results = {"comm": {"failures": comm_checks(rank, world)}}
    for name in args.runs.split(","):
        model = adam_task.make_model(len(chars), ctx, seed=args.seed)
        reference = adam_task.make_model(len(chars), ctx)   # evaluated with the full weights
        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if name.startswith("bf16") else MixedPrecisionPolicy())
        for layer in model.blocks.layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        state = None
        if name != "fsdp":
            grad_codec, weight_codec = CODECS[name]
            state = terse.fsdp.apply(model, grad_codec=grad_codec, weight_codec=weight_codec)
            # Every all-gather's output is hashed (Recording): the unsharded weights each rank
            # computes with must be the same bits everywhere.
            for i, (unit, rs, _) in enumerate(state.units):
                if name == "broken":
                    rs = Broken(state.communicator, grad_codec, name=unit)
                    model.get_submodule(unit).set_custom_reduce_scatter(rs)
                ag = Recording(state.communicator, weight_codec, name=unit)
                model.get_submodule(unit).set_custom_all_gather(ag)
                state.units[i] = (unit, rs, ag)
        if name in SHARDED:
            # terse.fsdp.apply first (its all-gathers stay, hashed above); the optimizer then
            # takes over every unit's reduce-scatter.
            codec, feedback, local = SHARDED[name]
            opt = FSDPShardedOneBitAdam(model, lr=args.lr, weight_decay=0.01, codec=codec,
                                        error_feedback=feedback, local_momentum=local,
                                        warmup_steps=args.sharded_warmup,
                                        communicator=state.communicator)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
        gen = torch.Generator().manual_seed(adam_task.data_seed(args, rank))

        def train(steps, first=0):
            for step in range(first, first + steps):
                at = torch.randint(0, len(mine) - ctx - 1, (batch,), generator=gen)
                seq = torch.stack([mine[a:a + ctx + 1] for a in at.tolist()])
                logits = model(seq[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, len(chars)),
                                       seq[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                adam_task.set_lr(opt, adam_task.lr_at(args, step))
                opt.step()
            return loss

        def local_weights():
            return torch.cat([p.detach().to_local().reshape(-1) for p in model.parameters()])

        def sharded_checkpoint_checks(at):
            """sharded-onebit's checkpoint after `at` steps: every rank's file, combine()d,
            resumed for RESUME steps, must repeat the continued run bit for bit; then the
            continuation the 2-rank resume repeats (resume()); then the checkpoint once more, from
            which the run goes on (so its end is the uninterrupted run's, as the check shows)."""
            out = {}
            path = os.path.join(args.work, f"sharded-{rank}.pt")
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                        "gen": gen.get_state()}, path)
            full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v   # every rank gathers
                    for k, v in model.state_dict().items()}
            if rank == 0:
                torch.save(full, os.path.join(args.work, "sharded-full.pt"))
            dist.barrier()
            train(RESUME, at)
            continued = local_weights()
            ckpts = [torch.load(os.path.join(args.work, f"sharded-{k}.pt"), weights_only=True)
                     for k in range(world)]

            def restore(optimizer=True):
                model.load_state_dict(ckpts[rank]["model"])
                if optimizer:
                    opt.load_state_dict(combine([c["optim"] for c in ckpts]))
                gen.set_state(ckpts[rank]["gen"])
            restore()
            train(RESUME, at)
            exact = torch.equal(local_weights(), continued)
            # The same without loading the optimizer (its state has moved on) must differ, or
            # the check could not tell whether the state was restored.
            restore(optimizer=False)
            train(RESUME, at)
            flags = torch.tensor([int(exact), int(not torch.equal(local_weights(), continued))])
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
            out["resume_exact"] = bool(flags[0]) and bool(flags[1])
            restore()
            out["curve"] = continue_training(model, opt, continuation_texts(world, rank, ctx),
                                             args, len(chars), held_out_loss)
            reference.load_state_dict(torch.load(os.path.join(args.work, "sharded-full.pt"),
                                                 weights_only=True))
            out["checkpoint_held_out"] = held_out_loss(reference)
            restore()
            return out

        dist.barrier()
        start = time.time()
        if name == "sharded-onebit":
            half = args.steps // 2
            train(half)
            seconds = time.time() - start
            r_half = sharded_checkpoint_checks(half)
            start = time.time()
            loss = train(args.steps - half, half)
            seconds += time.time() - start
        else:
            loss = train(args.steps)
            seconds = time.time() - start
        full = {k: v.full_tensor() if hasattr(v, "full_tensor") else v   # buffers are not DTensors
                for k, v in model.state_dict().items()}
        reference.load_state_dict(full)
        flat = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(gathered, flat)
        digest = hashlib.sha256()
        for _, _, ag in (state.units if state is not None else []):
            digest.update(ag.digest.digest())
        digests = [None] * world
        dist.all_gather_object(digests, digest.hexdigest())
        r = {"held_out": held_out_loss(reference), "train_last": loss.item(),
             "identical": all(torch.equal(g, gathered[0]) for g in gathered),
             "gathers_identical": len(set(digests)) == 1, "seconds": seconds}
        if name in SHARDED:
            by_unit = {u.name: u.calls for u in opt.units}
            r["calls"] = {u: [by_unit.get(u, 0), ag.calls] for u, _, ag in state.units
                          if u in by_unit}
            r["state_bytes"] = opt.state_bytes
            r["frozen_at"] = opt.frozen_at
            r["param_count"] = sum(p.numel() for p in reference.parameters())
        elif state is not None:
            r["calls"] = {u: [rs.calls, ag.calls] for u, rs, ag in state.units}
            r["residual_bytes"] = state.residual_bytes()
            # What the states really hold: each checkpoint's length less its fixed 48 bytes and
            # its padded codec spec (docs/wire-format.md), worker and server residuals together.
            r["checkpoint_residual_bytes"] = sum(
                len(rs.feedback.to_bytes()) - 48 - 4 * ((len(rs.codec) + 3) // 4)
                for _, rs, _ in state.units if rs.feedback is not None)
            r["unit_counts"] = {u: rs.feedback.count if rs.feedback is not None else 0
                                for u, rs, _ in state.units}
        if name == "sharded-onebit":
            r.update(r_half)
        if name == "onebit-ef":
            # Checkpoint: the residuals through torch.save/load (weights_only) with the model,
            # the optimizer and the data position; RESUME more steps from it must repeat the
            # continued run bit for bit, and the same with zeroed residuals must not.
            path = os.path.join(args.work, f"ckpt-{rank}.pt")
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                        "terse": state.state_dict(), "gen": gen.get_state()}, path)
            train(RESUME, args.steps)
            continued = local_weights()
            for zero in (False, True):
                ckpt = torch.load(path, weights_only=True)
                model.load_state_dict(ckpt["model"])
                opt.load_state_dict(ckpt["optim"])
                gen.set_state(ckpt["gen"])
                state.load_state_dict(ckpt["terse"])
                if zero:
                    state.reset()
                train(RESUME, args.steps)
                r["resume_exact" if not zero else "resume_zeroed_differs"] = (
                    torch.equal(local_weights(), continued) != zero)
            flags = torch.tensor([int(r["resume_exact"]), int(r["resume_zeroed_differs"])])
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)   # every rank's shard must agree
            r["resume_exact"], r["resume_zeroed_differs"] = bool(flags[0]), bool(flags[1])
        if rank == 0:
            torch.save(flat, os.path.join(args.work, f"weights-{name}.pt"))
            print(f"rank 0: {name}: held-out {r['held_out']:.4f} ({seconds:.1f} s)", flush=True)
        results[name] = r
    _testlib.finish_worker(rank, os.path.join(args.work, "results.json"), results, indent=1)


def resume(args):
    """RESUME_WORLD ranks load sharded-onebit's 4-rank checkpoint (the full weights, and
    combine() of the 4 optimizer files: FSDPShardedOneBitAdam re-lays each unit's state out for
    this world size) and run the same continuation as the 4 ranks did."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, distribute_tensor

    import terse.ddp
    import terse.fsdp
    from terse.sharded_optim import FSDPShardedOneBitAdam, combine

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    chars = adam_task.alphabet()
    _, held_out_loss = adam_task.rank_text(rank, [rank], args.ctx)
    model = adam_task.make_model(len(chars), args.ctx, seed=args.seed)
    for layer in model.blocks.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    state = terse.fsdp.apply(model, grad_codec="none", weight_codec="none")
    codec, feedback, local = SHARDED["sharded-onebit"]
    opt = FSDPShardedOneBitAdam(model, lr=args.lr, weight_decay=0.01, codec=codec,
                                error_feedback=feedback, local_momentum=local,
                                warmup_steps=args.sharded_warmup,
                                communicator=state.communicator)
    full = torch.load(os.path.join(args.work, "sharded-full.pt"), weights_only=True)
    mine = model.state_dict()
    model.load_state_dict({k: distribute_tensor(full[k], mesh, v.placements)
                           if isinstance(v, DTensor) else full[k] for k, v in mine.items()})
    if not args.fresh_optimizer:
        saved = [torch.load(os.path.join(args.work, f"sharded-{k}.pt"),
                            weights_only=True)["optim"] for k in range(4)]
        opt.load_state_dict(combine(saved))
    out = {"frozen_at": opt.frozen_at, "steps": opt.steps,
           "start": held_out_loss(model)}
    out["curve"] = continue_training(model, opt, continuation_texts(world, rank, args.ctx), args,
                                     len(chars), held_out_loss)
    flat = torch.cat([v.full_tensor().reshape(-1) for v in model.state_dict().values()
                      if isinstance(v, DTensor)])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    out["identical"] = all(torch.equal(g, gathered[0]) for g in gathered)
    name = "resume-fresh.json" if args.fresh_optimizer else "resume.json"
    _testlib.finish_worker(rank, os.path.join(args.work, name), out)


def comm_checks(rank, world):
    """The comms called as FSDP2 calls them, with each reduce op FSDP2 can ask for, on values
    whose sums float32 holds exactly: AVG, SUM and PREMUL_SUM(1/8) give exactly the expected
    part; a group that is not terse's world and a dtype terse does not move are refused.
    Returns every rank's failures (empty when all hold)."""
    import torch
    import torch.distributed as dist

    import terse.ddp
    import terse.fsdp
    comm = terse.ddp.default_communicator()
    failures = []
    n = 6
    base = torch.arange(world * n, dtype=torch.float32)
    total = sum(range(1, world + 1))
    mine = slice(rank * n, (rank + 1) * n)
    for label, op, expected in (("AVG", dist.ReduceOp.AVG, base * total / world),
                                ("SUM", dist.ReduceOp.SUM, base * total),
                                ("PREMUL_SUM(1/8)", dist.ReduceOp.PREMUL_SUM(0.125),
                                 base * total * 0.125)):
        rs = terse.fsdp.TerseReduceScatter(comm, "none")
        out = rs.allocate((n,), dtype=torch.float32, device=torch.device("cpu"))
        rs(out, base * (rank + 1), dist.group.WORLD, op)
        if not torch.equal(out, expected[mine]):
            failures.append(f"rank {rank}: reduce-scatter with {label} gave {out.tolist()}, not "
                            f"{expected[mine].tolist()}")
    ag = terse.fsdp.TerseAllGather(comm, "none")
    out = torch.full((world * n,), -1.0)
    ag(out, out[mine].copy_(base[mine]), dist.group.WORLD)   # in place, as FSDP2 calls it
    if not torch.equal(out, base):
        failures.append(f"rank {rank}: exact all-gather gave {out.tolist()}")
    pair = dist.new_group([0, 1])   # every rank takes part in making it
    for what, call, error in (
            ("a group other than terse's world",
             lambda: rs(torch.empty(n), torch.zeros(2 * n), pair, dist.ReduceOp.AVG),
             ValueError),
            ("a uint8 all-gather",
             lambda: ag(torch.empty(world * n, dtype=torch.uint8),
                        torch.zeros(n, dtype=torch.uint8), dist.group.WORLD), TypeError),
            ("onebit for weights", lambda: terse.fsdp.TerseAllGather(comm, "onebit"),
             ValueError)):
        if what.startswith("a group") and rank > 1:
            continue
        try:
            call()
            failures.append(f"rank {rank}: {what} was not refused")
        except error as e:
            if "terse.fsdp" not in str(e):
                failures.append(f"rank {rank}: {what} was refused without terse's message: {e}")
    gathered = [None] * world
    dist.all_gather_object(gathered, failures)
    return [f for fs in gathered for f in fs]


def launch(args, worker_args):
    """torchrun of --world ranks of this script (adam_task.launch's settings); FAIL if they do."""
    env = adam_task.isa_env(_testlib.torchrun_env(), args.isa)
    _testlib.torchrun(
        __file__, args.world, adam_task.free_port_pair(), os.path.join(args.work, "logs"),
        worker_args + ["--work", args.work, "--steps", str(args.steps), "--lr", str(args.lr),
                       "--ctx", str(args.ctx), "--batch", str(args.batch),
                       "--sharded-warmup", str(args.sharded_warmup)] + adam_task.noise_args(args),
        env, args.timeout)


def require_fsdp2():
    _testlib.require_torch(_testlib.VENV_HINT, gloo=True)
    import torch
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather  # noqa: F401
    except ImportError:
        print(f"SKIP: torch {torch.__version__} at {sys.executable} has no FSDP2 custom comms "
              f"(2.8 or later; scripts/torch-env.sh installs one)")
        sys.exit(SKIP)


def run_worker(args, runs):
    """One torchrun of the worker over `runs`; its results.json."""
    result_file = os.path.join(args.work, "results.json")
    if os.path.exists(result_file):
        os.remove(result_file)
    launch(args, ["worker", "--runs", runs])
    with open(result_file) as f:
        return json.load(f)


def noise(args):
    """The task's noise floor: terse's exact collectives (none, summed in another order than
    FSDP2's gloo) and the checked runs against FSDP2, over --seeds seeds on each of --isas
    (docs/convergence.md, "Noise floors")."""
    require_fsdp2()
    runs = (args.runs if args.runs != ",".join(RUNS) else "fsdp,none").split(",")

    def without_comm(one, runs_):
        res = run_worker(one, runs_)
        res.pop("comm")
        return res
    _testlib.noise_floor(args, runs, without_comm,
                         lambda results: adam_task.noise_table(runs[1:], results, runs[0]))


def drive(args):
    require_fsdp2()
    import torch
    os.makedirs(args.work, exist_ok=True)
    results = run_worker(args, args.runs)
    comm_failures = results.pop("comm")["failures"]
    base = results["fsdp"]["held_out"]
    limit = base * (1 + args.tolerance)
    failures = list(comm_failures)
    print(f"{'run':<19} {'held-out':>9} {'vs fsdp':>8} {'train':>7} {'seconds':>8}  residual B / "
          f"optimizer state B per rank")
    for name, r in results.items():
        extra = ""
        if "state_bytes" in r:
            # OneBitAdam (DDP) keeps m, v and the worker residual for every parameter and a
            # server residual for 1/world of them.
            full = 4 * (3 * r["param_count"] + -(-r["param_count"] // args.world))
            extra = f" / {r['state_bytes']} ({r['state_bytes'] / full:.3f}x OneBitAdam's {full})"
            r["state_ratio"] = r["state_bytes"] / full
        print(f"{name:<19} {r['held_out']:9.4f} {r['held_out'] / base:8.4f} "
              f"{r['train_last']:7.3f} {r['seconds']:8.1f}  {r.get('residual_bytes', '-')}{extra}")
        if not r["identical"]:
            failures.append(f"{name}: the ranks' full weights differ")
        if not r["gathers_identical"]:
            failures.append(f"{name}: the ranks' all-gathered weights differ")
        if name in WITHIN and r["held_out"] > limit:
            failures.append(f"{name} ends at {r['held_out']:.4f}, more than "
                            f"{args.tolerance:.0%} above FSDP2's {base:.4f}")
        if name in SHARDED.keys() - SHARDED_BROKEN - {"sharded-onebit-grad"} and \
                r["held_out"] > base * (1 + args.sharded_tolerance):
            failures.append(f"{name} ends at {r['held_out']:.4f}, more than "
                            f"{args.sharded_tolerance:.0%} above FSDP2's {base:.4f}")
        if name == "sharded-int8" and not r["state_ratio"] < 0.3:
            failures.append(f"sharded-int8 keeps {r['state_ratio']:.3f}x OneBitAdam's optimizer "
                            f"state, not about 1/{args.world}")
        if name == "sharded-onebit" and not r.get("resume_exact"):
            failures.append("sharded-onebit: resuming from every rank's checkpoint (model, "
                            "FSDPShardedOneBitAdam) did not repeat the continued run bit for bit")
        expect = args.sharded_warmup if args.sharded_warmup <= args.steps else 0
        if name in SHARDED and r.get("frozen_at") != expect:
            failures.append(f"{name}: froze at step {r.get('frozen_at')}, not {expect}")
        if name in WEIGHTS and r["held_out"] > base * (1 + args.weight_tolerance):
            failures.append(f"{name} ends at {r['held_out']:.4f}, more than "
                            f"{args.weight_tolerance:.0%} above FSDP2's {base:.4f}")
        for unit, (rs_calls, ag_calls) in r.get("calls", {}).items():
            if rs_calls < args.steps or ag_calls < args.steps:
                failures.append(f"{name}: unit '{unit}' ran {rs_calls} reduce-scatters and "
                                f"{ag_calls} all-gathers through terse in {args.steps} steps")
    # What error feedback buys: the same optimizer without it (compression broken) must end
    # measurably above the run with it. Against FSDP2's AdamW the broken run is not far off once
    # the rate decays (+0.4%, docs/convergence.md "Noise floors"), so the check compares the
    # sharded optimizer with itself, whose runs differ only in the error feedback.
    if "sharded-onebit" in results and "sharded-onebit-noef" in results:
        good, bad = results["sharded-onebit"]["held_out"], results["sharded-onebit-noef"]["held_out"]
        if bad <= good * (1 + args.ef_gain):
            failures.append(f"sharded-onebit-noef (onebit without error feedback) ends at "
                            f"{bad:.4f}, within {args.ef_gain:.1%} of sharded-onebit's {good:.4f}: "
                            f"the check cannot tell working error feedback from none")
    if "broken" in results and results["broken"]["held_out"] <= limit:
        failures.append(f"the broken reduce-scatter ends at {results['broken']['held_out']:.4f}, "
                        f"within {args.tolerance:.0%} of FSDP2's {base:.4f}: the bound cannot "
                        f"tell a working codec from a broken one")
    if "int8" in results and "none" in results:
        a = torch.load(os.path.join(args.work, "weights-int8.pt"))
        b = torch.load(os.path.join(args.work, "weights-none.pt"))
        if torch.equal(a, b):
            failures.append("int8's weights equal none's: the codec did not run")
    if "onebit-ef" in results:
        r = results["onebit-ef"]
        expected = sum(4 * c for c in r["unit_counts"].values())
        if not r["residual_bytes"] or r["residual_bytes"] != expected:
            failures.append(f"onebit-ef holds {r['residual_bytes']} residual bytes, not "
                            f"4 per unit parameter = {expected}")
        if r.get("checkpoint_residual_bytes") != expected:
            failures.append(f"onebit-ef's checkpoints hold {r.get('checkpoint_residual_bytes')} "
                            f"bytes of residuals, not the {expected} residual_bytes() reports")
        if not r.get("resume_exact"):
            failures.append("onebit-ef: resuming from the checkpoint (model, optimizer, terse "
                            "residuals) did not repeat the continued run bit for bit")
        if not r.get("resume_zeroed_differs"):
            failures.append("onebit-ef: resuming with zeroed residuals repeated the continued run: "
                            "the check cannot tell whether the residuals were restored")
        if min(r["unit_counts"].values()) == 0:
            failures.append("onebit-ef: a unit kept no residual")
    if "sharded-onebit" in results and args.world == 4:
        failures += check_resume(args, results["sharded-onebit"])
    if failures:
        sys.exit("FAIL: " + "; ".join(failures))
    if set(results) != set(RUNS):
        print(f"OK: the comms alone and the runs {', '.join(results)}")
        return
    print(f"OK: terse.fsdp int8/mxfp8 gradients (bf16 mixed precision too) within "
          f"{args.tolerance:.0%} of FSDP2's own collectives, int8 weights within "
          f"{args.weight_tolerance:.0%}, the broken one outside, ranks bit-identical, the "
          f"residuals' checkpoint exact; FSDPShardedOneBitAdam with onebit within "
          f"{args.sharded_tolerance:.0%} (without error feedback {args.ef_gain:.1%} worse), its "
          f"checkpoint exact "
          f"and resumed at {RESUME_WORLD} ranks within {args.resume_tolerance:.0%}")


def check_resume(args, four):
    """Runs resume() at RESUME_WORLD ranks and compares its curve with the 4 ranks'."""
    import copy
    two_args = copy.copy(args)
    two_args.world = RESUME_WORLD

    out_file = os.path.join(args.work, "resume.json")
    if os.path.exists(out_file):
        os.remove(out_file)
    launch(two_args, ["resume"])
    with open(out_file) as f:
        two = json.load(f)
    failures = []
    print(f"sharded-onebit resumed at {RESUME_WORLD} ranks from the 4 ranks' checkpoint: held-out "
          f"every {CONTINUE_EVERY} steps {['%.4f' % x for x in two['curve']]} against the 4 "
          f"ranks' {['%.4f' % x for x in four['curve']]} (checkpoint {four['checkpoint_held_out']:.4f}, "
          f"reloaded {two['start']:.4f})")
    if two["frozen_at"] != args.sharded_warmup or two["steps"] != args.steps // 2:
        failures.append(f"the resumed optimizer is at step {two['steps']} frozen at "
                        f"{two['frozen_at']}, not {args.steps // 2} and {args.sharded_warmup}")
    if not two["identical"]:
        failures.append(f"the {RESUME_WORLD} resumed ranks' weights differ")
    # One-sided: at 2 ranks each rank's momentum spans two topics, so onebit loses less and the
    # resumed curve may fall faster. This bound says the resumed run trains on; it cannot tell a
    # restored optimizer from a lost one (with the decaying rate, a resume with a fresh optimizer,
    # `resume --fresh-optimizer`, also ends below the 4 ranks' curve: docs/optim.md). Lost state
    # is caught where it can be exactly: the 4-rank resume above is bit for bit and differs
    # without the optimizer, and optim_test moves every element's state (deserializeRemapped).
    for k, (a, b) in enumerate(zip(four["curve"], two["curve"])):
        if b > a * (1 + args.resume_tolerance):
            failures.append(f"resumed at {RESUME_WORLD} ranks, the held-out loss after "
                            f"{(k + 1) * CONTINUE_EVERY} steps is {b:.4f}, more than "
                            f"{args.resume_tolerance:.0%} above the 4 ranks' {a:.4f}")
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["drive", "worker", "resume", "noise"])
    p.add_argument("--work", required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--ctx", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--weight-tolerance", type=float, default=0.05)
    p.add_argument("--sharded-tolerance", type=float, default=0.02)
    p.add_argument("--sharded-warmup", type=int, default=SHARDED_WARMUP)
    p.add_argument("--resume-tolerance", type=float, default=0.02)
    p.add_argument("--fresh-optimizer", action="store_true",
                   help="resume: do not load the optimizer's state (a lost state, measured by hand)")
    p.add_argument("--ef-gain", type=float, default=0.005,
                   help="how much worse sharded-onebit-noef must end than sharded-onebit")
    p.add_argument("--timeout", type=int, default=500)
    adam_task.add_noise_args(p, "cosine")
    args = p.parse_args()
    {"drive": drive, "worker": worker, "resume": resume, "noise": noise}[args.mode](args)


if __name__ == "__main__":
    main()
