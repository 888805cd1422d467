#!/usr/bin/env python3
"""A PyTorch training task that survives `kill -9` of a rank (issue #48; docs/pytorch.md,
"Surviving a dead rank").

Each case starts --world ranks as processes of this script, meeting on file stores that outlive
any rank (terse: TERSE_STORE=<directory>; torch: gloo over a FileStore), and trains a small MLP
for STEPS steps: DDP with terse's hook (onebit, which keeps error-feedback residuals, or int8).
A chosen rank dies by SIGKILL at a chosen point:

- between: the victim kills itself between two steps (the others wait in the next step's call);
- hook: inside a step, in DDP's comm hook before its bucket's allreduce;
- fault: inside a call, at a send or a receive (TERSE_FAULT for the victim alone, e.g.
  kill:after_sends=20 or kill:phase=gather:after_recvs=12; a victim killed at a receive may
  have sent all some survivors needed, which then finish the step the others failed);
- random: a step, a way and a victim drawn from --seed (printed; pass it to replay);
- backend: DDP on terse.backend's process group (no hook), the victim killed between steps:
  the survivors make torch's group again as with gloo (a ProcessGroup is not shrunk in place);
- adam-warmup, adam-freeze, adam-frozen: terse.optim.OneBitAdam (no DDP; it averages the
  warm-up's gradients itself) with the victim killed between steps during the warm-up, at the
  freeze and after it; the survivors move it over with OneBitAdam.shrink;
- fsdp: FSDP2 with terse.fsdp's comms (onebit gradients) instead of DDP; the victim kills itself
  between steps. The dead rank's shards are gone, so the survivors go back to the last full
  checkpoint (every CHECKPOINT_EVERY steps), shard a new model over the new world and move the
  residuals over (TerseFSDP.shrink); the failure-free continuation loads every old rank's
  residuals of that checkpoint (the victim's file included) as a checkpoint at another world
  size.

The survivors see a failed collective (terse.ddp.is_failure of what backward() raised), shrink
terse's process-wide communicator (terse.ddp.shrink_default), agree on the last step they all
completed (one allreduce on the new world) and roll back to it (a survivor may be a step ahead
when the victim died after sending what it needed), move the hook's state over
(TerseState.shrink), re-create torch's default process group for the new ranks over a fresh
FileStore, wrap the model in a new DDP and finish. Checked per case:

- the victim died by SIGKILL; every survivor finished, with bit-identical weights, and agreed on
  the same step, at most one behind the step it had reached;
- no survivor waited past the timeout: from the victim's death (its exit, seen by this driver) to
  each survivor's failed call and to its next completed step, less than TERSE_TIMEOUT_MS
  (TIMEOUT_MS, small);
- held-out loss within 2% of a run that continues from the same step at the smaller world
  without a failure: after finishing, the survivors restore the state they agreed on (weights,
  SGD momentum and the hook's checkpoint of the old world, which loads at another world size as
  a checkpoint does), wrap a new DDP and train the same steps again on the shrunk world.

The time from the kill to the next completed step is printed per survivor and as the median over
every run. Ranks are processes of this script; SKIP (77) without torch.
"""
import argparse
import gc
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

from _testlib import SKIP, expect_raises, python_path, require_torch

TIMEOUT_MS = 8000   # TERSE_TIMEOUT_MS of the ranks: the recovery must come well inside it
STEPS = 80
LR = 0.02           # SGD with momentum 0.9: small enough that a perturbation (another residual)
                    # stays small (at 0.1 this task's held-out loss moved by 10-40% with it)
FSDP_LR = 0.1       # plain SGD in the FSDP case (its checkpoint holds no momentum)
LOSS_BOUND = 0.02   # held-out loss against the failure-free continuation

# name: (codec, world, victim, how, at). `at` is a step number, or for "fault" the trigger of the
# victim's TERSE_FAULT kill rule (docs/env.md): a count of sends or receives, of one phase or all
# (a step takes about world sends on these small buckets).
CASES = {
    "between": ("onebit", 3, 0, "between", 9),
    "hook": ("onebit", 4, 1, "hook", 6),
    "fault": ("int8", 4, 3, "fault", "after_sends=20"),
    "fault-recv": ("onebit", 3, 1, "fault", "phase=gather:after_recvs=12"),
    "fsdp": ("onebit", 3, 2, "fsdp", 10),
    # DDP on terse.backend (no hook): the group is made again, as with gloo.
    "backend": ("none", 3, 2, "backend", 7),
    # terse.optim.OneBitAdam without DDP (it averages the warm-up's gradients itself): a rank
    # dies between steps during the warm-up, at the freeze (after the warm-up's last step,
    # before the first compressed one), and after 5 compressed steps (residuals to move).
    "adam-warmup": ("onebit", 3, 1, "adam", 4),
    "adam-freeze": ("onebit", 4, 0, "adam", 10),
    "adam-frozen": ("onebit", 3, 2, "adam", 15),
}
ADAM_WARMUP = 10
CHECKPOINT_EVERY = 4   # the FSDP case's full checkpoints (the dead rank's shards are gone)


def random_case(seed):
    rng = random.Random(seed)
    world = rng.choice((3, 4))
    how = rng.choice(("between", "hook", "fault"))
    if how == "fault":
        trigger = rng.choice(("after_sends", "after_recvs"))
        at = f"{trigger}={rng.randrange(world, world * (STEPS - 4))}"
    else:
        at = rng.randrange(1, STEPS - 3)
    return (rng.choice(("onebit", "int8")), world, rng.randrange(world), how, at)


# ---- the task ------------------------------------------------------------------------------

def net(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))


def batch(torch, step, rank, size=32):
    """Rank `rank`'s batch of `step`: a function of the two, so a run that resumes a step on the
    same world sees the same data."""
    g = torch.Generator().manual_seed(7919 * step + rank)
    x = torch.randn(size, 16, generator=g)
    w = torch.arange(64, dtype=torch.float32).reshape(16, 4) / 64.0
    return x, torch.tanh(x @ w)


def heldout_loss(torch, model):
    x, y = batch(torch, 10**6, 0, size=1024)
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x), y))


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def shrink_and_gather(torch, result, error, done, mine):
    """After a failed step (this rank had completed `done`): record it, shrink terse's
    process-wide communicator and gather every survivor's step number `mine`. Returns the new and
    old communicators and those numbers in new rank order."""
    import terse.ddp
    result["failed"] = time.time()
    result["error"] = str(error)[-400:]
    result["reached"] = done
    new, old = terse.ddp.shrink_default()
    result["shrunk"] = time.time()
    table = torch.zeros(new.size)
    table[new.rank] = mine
    new.allreduce(table, "none", "sum")
    return new, old, [int(v) for v in table.tolist()]


def shrink_and_agree(torch, result, error, done):
    """shrink_and_gather, then agree on the last step every survivor completed (one may be a step
    ahead of another). Returns the new and old communicators and that step."""
    new, old, steps = shrink_and_gather(torch, result, error, done, done)
    k = min(steps)
    if max(steps) - k > 1:
        raise AssertionError(f"survivors more than a step apart: {steps}")
    return new, old, k


class Steps:
    """A training loop's bookkeeping (the DDP and OneBitAdam workers): the steps completed, the
    state after each of the last two (a survivor may have to roll back one), and when the first
    step after the shrink completed (result["next_step"])."""

    def __init__(self, result, snap):
        self.result = result
        self.done = 0
        self.snaps = {0: snap}   # completed step -> state after it
        self.recovering = False

    def completed(self, snap):
        """Step `done` completed and left the state `snap`."""
        self.done += 1
        self.snaps[self.done] = snap
        self.snaps.pop(self.done - 2, None)
        if self.recovering:
            self.result["next_step"] = time.time()
            self.recovering = False

    def roll_back(self, k):
        """After the shrink: back to step k, the last every survivor completed. Returns the state
        after it."""
        self.result["agreed"], self.result["rolled_back"] = k, self.done - k
        self.done = k
        self.snaps = {k: self.snaps[k]}
        self.recovering = True
        return self.snaps[k]


def worker(args):
    require_torch(gloo=True, terse_python=True)
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import terse.ddp
    torch.set_num_threads(1)
    codec, _, victim, how, at = json.loads(args.case)
    rank, world = int(os.environ["TERSE_RANK"]), int(os.environ["TERSE_WORLD_SIZE"])
    generation = 0   # process groups made so far: each over a fresh FileStore
    # The backend case: torch's group is terse's (terse.backend), DDP reduces through it exactly
    # and there is no hook; the process-wide communicator only says who survived.
    backend = how == "backend"
    if backend:
        import terse.backend

    def init_group(r, n):
        dist.init_process_group("terse" if backend else "gloo",
                                init_method=f"file://{args.store}-torch{generation}",
                                rank=r, world_size=n)

    init_group(rank, world)
    old_rank = rank
    model = net(torch)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    state = None if backend else terse.ddp.TerseState(codec)
    terse.ddp.default_communicator()
    start_loss = heldout_loss(torch, model)

    def hook(st, bucket):
        if how == "hook" and old_rank == victim and steps.done == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return terse.ddp.terse_hook(st, bucket)

    def wrap(st):
        ddp = DDP(model)
        if st is not None:
            ddp.register_comm_hook(st, hook)
        return ddp

    def snapshot(st):
        return ({k: v.clone() for k, v in model.state_dict().items()},
                copy.deepcopy(opt.state_dict()), st.state_dict() if st is not None else None)

    def restore(snap, st, strict=True):
        weights, momentum, hook_state = snap
        with torch.no_grad():
            model.load_state_dict(weights)
        opt.load_state_dict(copy.deepcopy(momentum))
        if st is not None:
            st.load_state_dict(hook_state, strict=strict)

    def train_step(ddp, step, r):
        x, y = batch(torch, step, r)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()

    ddp = wrap(state)
    result = {"old_rank": rank}
    steps = Steps(result, snapshot(state))
    while steps.done < STEPS:
        if (how in ("between", "backend") and rank == victim and steps.done == at
                and generation == 0):
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            train_step(ddp, steps.done, rank)
        except Exception as error:   # what a training loop sees
            if not terse.ddp.is_failure(error) or generation > 0:
                raise
            new, old, k = shrink_and_agree(torch, result, error, steps.done)
            # Back to the state after step k, also when this rank is at k: the failed step may
            # have changed the residuals. The hook's checkpoint is the old world's: load it
            # while the state still has the old communicator, then move it over.
            reference_start = steps.roll_back(k)
            restore(reference_start, state)
            if state is not None:
                expect_raises(ValueError, lambda: state.shrink(old), "not the one this state")
                state.shrink(new)
            old.close()
            # Torch's group: gloo cannot shrink (dist.shrink_group refuses it), so the default
            # group is made again for the new ranks, over a fresh FileStore.
            del ddp
            gc.collect()
            dist.destroy_process_group()
            generation += 1
            rank, world = new.rank, new.size
            init_group(rank, world)
            ddp = wrap(state)
            result["regrouped"] = time.time()
            continue
        steps.completed(snapshot(state))
    if generation == 0:
        raise AssertionError("no failure was seen: the victim did not die")
    result.update(rank=rank, world=world, digest=digest(model),
                  heldout=heldout_loss(torch, model), start_loss=start_loss, shrinks=1)
    if state is not None:
        result.update(shrinks=state.shrinks, claimed=state.claimed,
                      error_feedback=state.error_feedback)

    # The failure-free continuation from the same step at the smaller world.
    del ddp
    gc.collect()
    reference = None if backend else terse.ddp.TerseState(codec)
    restore(reference_start, reference, strict=False)
    ddp = wrap(reference)
    for step in range(result["agreed"], STEPS):
        train_step(ddp, step, rank)
    result["reference"] = heldout_loss(torch, model)
    if args.fresh and state is not None and state.error_feedback:
        # The same from zero residuals: what the residuals are worth on this task (a figure).
        del ddp
        gc.collect()
        fresh = terse.ddp.TerseState(codec)
        restore(reference_start, fresh, strict=False)
        fresh.reset()
        ddp = wrap(fresh)
        for step in range(result["agreed"], STEPS):
            train_step(ddp, step, rank)
        result["fresh"] = heldout_loss(torch, model)
    with open(args.out, "w") as f:
        json.dump(result, f)
    dist.barrier()
    del ddp
    terse.ddp.shutdown()
    dist.destroy_process_group()


def fsdp_worker(args):
    """The FSDP2 case: terse.fsdp's comms (onebit gradients, residuals per unit) on a CPU mesh
    over gloo. The dead rank's shards are gone, so the survivors go back to the last full
    checkpoint (every CHECKPOINT_EVERY steps, kept in memory here; a file in practice), load it
    into a new model, shard that over the new world and move terse.fsdp's residuals over
    (TerseFSDP.shrink)."""
    require_torch(gloo=True, terse_python=True)
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import fully_shard
        import terse.fsdp
    except ImportError as e:
        print(f"SKIP: FSDP2's custom comms are not in this torch ({e})")
        sys.exit(SKIP)
    import terse.ddp
    torch.set_num_threads(1)
    codec, _, victim, _, at = json.loads(args.case)
    rank, world = int(os.environ["TERSE_RANK"]), int(os.environ["TERSE_WORLD_SIZE"])
    old_rank = rank
    generation = 0

    def init_group(r, n):
        dist.init_process_group("gloo", init_method=f"file://{args.store}-torch{generation}",
                                rank=r, world_size=n)

    def sharded(full, comm, residuals=None):
        """A model of the full weights `full`, sharded over the current world with terse's
        comms: the residuals of `residuals` (a TerseFSDP) moved over, or fresh ones."""
        model = net(torch)
        model.load_state_dict(full)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        if residuals is None:
            return model, terse.fsdp.apply(model, grad_codec=codec, communicator=comm)
        return model, residuals.shrink(model, comm)

    def full_weights(model):
        return {k: v.full_tensor().clone() for k, v in model.state_dict().items()}

    def train_step(model, opt, step, r):
        x, y = batch(torch, step, r)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    init_group(rank, world)
    comm = terse.ddp.default_communicator()
    start = {k: v.clone() for k, v in net(torch).state_dict().items()}
    start_loss = heldout_loss(torch, net(torch))
    model, state = sharded(start, comm)
    opt = torch.optim.SGD(model.parameters(), lr=FSDP_LR)
    done = 0
    checkpoint = (0, start, state.state_dict())   # (step, full weights, terse.fsdp residuals)
    result = {"old_rank": rank}
    recovering = False
    while done < STEPS:
        if rank == victim and done == at and generation == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            train_step(model, opt, done, rank)
            done += 1
            if done % CHECKPOINT_EVERY == 0:
                checkpoint = (done, full_weights(model), state.state_dict())
                # Every rank's residuals on disk too, for the reference run below.
                torch.save(checkpoint[2], f"{args.store}-fsdp-step{done}-rank{rank}.pt")
        except Exception as error:
            if not terse.ddp.is_failure(error) or generation > 0:
                raise
            new, old, held = shrink_and_gather(torch, result, error, done, checkpoint[0])
            if len(set(held)) != 1:
                raise AssertionError(f"survivors hold different checkpoints: {held}")
            k, weights, residuals = checkpoint
            state.load_state_dict(residuals)   # the old world's, as of step k
            result["agreed"], result["rolled_back"] = k, done - k
            done = k
            del model, opt
            gc.collect()
            dist.destroy_process_group()
            generation += 1
            rank, world = new.rank, new.size
            init_group(rank, world)
            model, state = sharded(weights, new, residuals=state)
            result["regrouped"] = time.time()
            # Units with residuals, now laid out for the new world (the root has no parameters).
            result["carried"] = [name for name, rs, _ in state.units if rs.feedback is not None]
            old.close()
            opt = torch.optim.SGD(model.parameters(), lr=FSDP_LR)
            recovering = True
            continue
        if recovering:
            result["next_step"] = time.time()
            recovering = False
    if generation == 0:
        raise AssertionError("no failure was seen: the victim did not die")
    full = full_weights(model)
    h = hashlib.sha256()
    for v in full.values():
        h.update(v.numpy().tobytes())
    plain = net(torch)
    plain.load_state_dict(full)
    result.update(rank=rank, world=world, digest=h.hexdigest(), heldout=heldout_loss(torch, plain),
                  start_loss=start_loss, shrinks=1, residual_bytes=state.residual_bytes())

    # The failure-free continuation from the checkpoint at the smaller world: every old rank's
    # residuals of step k (the victim's file included) moved to the new world as a checkpoint
    # at another world size is (TerseFSDP.load_state_dict of all of them: averaged, re-laid
    # out).
    model, state = sharded(weights, new)
    state.load_state_dict([torch.load(f"{args.store}-fsdp-step{k}-rank{r}.pt")
                           for r in range(world + 1)])
    opt = torch.optim.SGD(model.parameters(), lr=FSDP_LR)
    for step in range(k, STEPS):
        train_step(model, opt, step, rank)
    plain.load_state_dict(full_weights(model))
    result["reference"] = heldout_loss(torch, plain)
    with open(args.out, "w") as f:
        json.dump(result, f)
    dist.barrier()
    terse.ddp.shutdown()
    dist.destroy_process_group()


def adam_worker(args):
    """The OneBitAdam cases: a plain model (no DDP), terse.optim.OneBitAdam on the process-wide
    communicator; after the shrink, OneBitAdam.shrink moves it to the new one."""
    require_torch(gloo=True, terse_python=True)
    import torch

    import terse.ddp
    import terse.optim
    torch.set_num_threads(1)
    codec, _, victim, _, at = json.loads(args.case)
    rank, world = int(os.environ["TERSE_RANK"]), int(os.environ["TERSE_WORLD_SIZE"])
    model = net(torch)
    start_loss = heldout_loss(torch, model)

    def make_opt():
        return terse.optim.OneBitAdam(model.parameters(), lr=3e-3, codec=codec,
                                      warmup_steps=ADAM_WARMUP)

    def snapshot(o):
        return ({k: v.clone() for k, v in model.state_dict().items()}, o.state_dict())

    def restore(snap, o):
        with torch.no_grad():
            model.load_state_dict(snap[0])
        o.load_state_dict(snap[1])

    def train_step(o, step, r):
        x, y = batch(torch, step, r)
        o.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        o.step()

    opt = make_opt()
    shrunk = False
    result = {"old_rank": rank}
    steps = Steps(result, snapshot(opt))
    while steps.done < STEPS:
        if rank == victim and steps.done == at and not shrunk:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            train_step(opt, steps.done, rank)
        except Exception as error:
            if not terse.ddp.is_failure(error) or shrunk:
                raise
            new, old, k = shrink_and_agree(torch, result, error, steps.done)
            # The old world's state, while the optimizer still has the old communicator.
            reference_start = steps.roll_back(k)
            restore(reference_start, opt)
            result["frozen_at_kill"] = opt.frozen
            opt.shrink(new)
            old.close()
            rank, world = new.rank, new.size
            result["regrouped"] = time.time()
            shrunk = True
            continue
        steps.completed(snapshot(opt))
    if not shrunk:
        raise AssertionError("no failure was seen: the victim did not die")
    result.update(rank=rank, world=world, digest=digest(model),
                  heldout=heldout_loss(torch, model), start_loss=start_loss, shrinks=1)

    # The failure-free continuation: a new OneBitAdam on the shrunk world loads the state the
    # survivors agreed on as a checkpoint of another world size.
    reference = make_opt()
    restore(reference_start, reference)
    for step in range(result["agreed"], STEPS):
        train_step(reference, step, rank)
    result["reference"] = heldout_loss(torch, model)
    with open(args.out, "w") as f:
        json.dump(result, f)
    terse.ddp.default_communicator().barrier()
    terse.ddp.shutdown()


# ---- the driver ----------------------------------------------------------------------------

def run_case(args, name, case):
    codec, world, victim, how, at = case
    work = os.path.join(args.work, name)
    store = os.path.join(work, "store")
    if os.path.exists(store):
        shutil.rmtree(store)
    os.makedirs(store)
    for f in os.listdir(work):
        if f.startswith("store-"):
            os.remove(os.path.join(work, f))
    procs, outs, deaths = [], [], {}
    for r in range(world):
        env = dict(os.environ, TERSE_RANK=str(r), TERSE_WORLD_SIZE=str(world),
                   TERSE_STORE=store, TERSE_TIMEOUT_MS=str(TIMEOUT_MS),
                   UCX_NET_DEVICES=os.environ.get("UCX_NET_DEVICES", "lo"),
                   TERSE_CPU_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=python_path())
        for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TERSE_FAULT"):
            env.pop(v, None)
        if how == "fault" and r == victim:
            env["TERSE_FAULT"] = f"kill:{at}"
        out = os.path.join(work, f"rank{r}.json")
        if os.path.exists(out):
            os.remove(out)
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__),
             {"fsdp": "fsdp-worker", "adam": "adam-worker"}.get(how, "worker"),
             "--case", json.dumps(case),
             "--store", store, "--out", out] + (["--fresh"] if args.fresh else []),
            env=env, start_new_session=True))

    def watch(r, p):
        p.wait()
        deaths[r] = time.time()
    watchers = [threading.Thread(target=watch, args=(r, p), daemon=True)
                for r, p in enumerate(procs)]
    for t in watchers:
        t.start()
    deadline = time.monotonic() + args.timeout
    for t in watchers:
        t.join(max(0.1, deadline - time.monotonic()))
    if any(t.is_alive() for t in watchers):
        for p in procs:
            p.kill()
        sys.exit(f"FAIL {name}: the ranks did not finish within {args.timeout} s")

    label = f"{name}: {codec}, {world} ranks, rank {victim} killed ({how} {at})"
    if procs[victim].returncode != -signal.SIGKILL:
        sys.exit(f"FAIL {label}: the victim exited with {procs[victim].returncode}, not SIGKILL")
    results = []
    for r, p in enumerate(procs):
        if r == victim:
            continue
        if p.returncode != 0 or not os.path.exists(outs[r]):
            sys.exit(f"FAIL {label}: survivor {r} exited with {p.returncode}")
        with open(outs[r]) as f:
            results.append(json.load(f))
    died = deaths[victim]
    timeout = TIMEOUT_MS / 1000
    first = results[0]
    recoveries, phases = [], []
    for res in results:
        who = f"survivor {res['old_rank']} (now {res['rank']} of {res['world']})"
        assert res["world"] == world - 1 and res["shrinks"] == 1, f"{label}: {who}: {res}"
        assert res["digest"] == first["digest"], \
            f"FAIL {label}: {who}'s weights differ from survivor {first['old_rank']}'s"
        assert res["agreed"] == first["agreed"], f"FAIL {label}: steps differ: {results}"
        assert 0 <= res["rolled_back"] <= (CHECKPOINT_EVERY if how == "fsdp" else 1), \
            f"{label}: {who}: {res}"
        detect, recover = res["failed"] - died, res["next_step"] - died
        assert detect < timeout and recover < timeout, \
            (f"FAIL {label}: {who} took {detect:.2f} s to see the failure and {recover:.2f} s to "
             f"complete a step after the kill; TERSE_TIMEOUT_MS is {TIMEOUT_MS}")
        gap = abs(res["heldout"] - res["reference"]) / res["reference"]
        assert gap <= LOSS_BOUND, \
            (f"FAIL {label}: {who}: held-out loss {res['heldout']:.5f} vs {res['reference']:.5f} "
             f"without the failure ({100 * gap:.2f}% > {100 * LOSS_BOUND:.0f}%)")
        assert res["heldout"] < 0.5 * res["start_loss"], f"{label}: did not train: {res}"
        if res.get("error_feedback"):
            # The residuals moved over were taken up by the new DDP's buckets, not dropped.
            assert res["claimed"] >= 1, f"{label}: {who}: residuals not carried: {res}"
        if how == "fsdp":
            assert res["carried"] == ["0", "2"], f"{label}: {who}: residuals not carried: {res}"
        if how == "adam":
            assert res["frozen_at_kill"] == (res["agreed"] >= ADAM_WARMUP), \
                f"{label}: {who}: the kill was not where the case says (warm-up / frozen): {res}"
        recoveries.append(recover)
        phases.append((detect, res["shrunk"] - res["failed"], res["regrouped"] - res["shrunk"]))
    print(f"ok {label}: agreed on step {first['agreed']} (rolled back: "
          f"{[r['rolled_back'] for r in results]}), held-out {first['heldout']:.5f} vs "
          f"{first['reference']:.5f} without the failure"
          + (f" ({first['fresh']:.5f} from zero residuals)" if "fresh" in first else "")
          + "; kill to next step "
          f"{', '.join(f'{s:.3f}' for s in recoveries)} s", flush=True)
    return {"case": case, "agreed": first["agreed"], "recover_s": recoveries,
            "detect_s": [p[0] for p in phases], "shrink_s": [p[1] for p in phases],
            "regroup_s": [p[2] for p in phases],
            "rolled_back": [r["rolled_back"] for r in results],
            "heldout": first["heldout"], "reference": first["reference"]}


def drive(args):
    require_torch(gloo=True, terse_python=True)
    os.makedirs(args.work, exist_ok=True)
    names = args.cases.split(",")
    if "fsdp" in names:
        try:
            import terse.fsdp  # noqa: F401
        except ImportError as e:
            print(f"SKIP: {e}")
            sys.exit(SKIP)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    summary = {}
    start = time.monotonic()
    for name in names:
        if name == "random":
            case = random_case(seed)
            print(f"random case from --seed {seed}: {case}", flush=True)
        elif name in CASES:
            case = CASES[name]
        else:
            sys.exit(f"unknown case {name!r}; cases: {', '.join(CASES)}, random")
        summary[name] = run_case(args, name, case)
    times = [t for s in summary.values() for t in s["recover_s"]]
    median = statistics.median(times)
    detect = statistics.median(t for s in summary.values() for t in s["detect_s"])
    shrink = statistics.median(t for s in summary.values() for t in s["shrink_s"])
    regroup = statistics.median(t for s in summary.values() for t in s["regroup_s"])
    print(f"kill to the next completed step: median {median:.3f} s over {len(times)} survivors "
          f"of {len(summary)} runs ({min(times):.3f}-{max(times):.3f} s); of it, kill to the "
          f"failed call {detect:.3f} s, the shrink {shrink:.3f} s, then the agreement, the "
          f"roll-back and torch's group and model made again {regroup:.3f} s (medians); "
          f"{time.monotonic() - start:.0f} s in all", flush=True)
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump({"seed": seed, "median_recover_s": median, "cases": summary}, f, indent=1)
    print("PASS", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=["drive", "worker", "fsdp-worker", "adam-worker"])
    p.add_argument("--work", default="/tmp/terse-shrink-task")
    p.add_argument("--cases", default="between,hook,fault,random")
    p.add_argument("--seed", type=int, default=None, help="the random case's seed")
    p.add_argument("--timeout", type=float, default=100, help="seconds per case")
    p.add_argument("--fresh", action="store_true",
                   help="also run the continuation from zero residuals (a figure: what the "
                        "residuals are worth), printed beside the failure-free one")
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    {"drive": drive, "worker": worker, "fsdp-worker": fsdp_worker,
     "adam-worker": adam_worker}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
