#!/usr/bin/env python3
"""terse's optimizers on parameters without gradients, and their agreement across ranks
(python/terse/_agree.py; docs/optim.md, "Parameters without a gradient" and "Every rank alike";
issue #44).

  unit:  one process. OneBitAdam and ShardedOneBitAdam on a model with a frozen embedding
         (requires_grad=False), a layer never used and a layer used every other step: the
         warm-up equals torch.optim.AdamW (as onebit_adam_unit.py checks it: within 1e-6), the
         frozen and the never-used parameters bit-identical to their start (before: weight decay
         moved the frozen embedding), the other layer unchanged bit for bit by each step that
         gives it no gradient, also after the freeze; a step without any gradient is no step; a
         parameter unfrozen after the optimizer was made, and ShardedOneBitAdam's lossy
         param_codec with a missing gradient, are clear errors.
  ranks: two processes on a file store. A parameter with a gradient on one rank only: ValueError
         on both naming it (OneBitAdam and ShardedOneBitAdam), and a step where both ranks leave
         it out then works, the ranks equal. ShardedOneBitAdam built with the same shapes in
         another order on rank 1: ValueError on both (before: gradients +1 and -1 averaged to 0
         and nothing moved); a float64 parameter on rank 1 only: its ValueError, and rank 0
         terse's error naming rank 1 at once; other betas on rank 1: ValueError about the
         options; warm-up 2 on rank 0 and 3 on rank 1: an error naming the warm-up on both ranks
         by step 3 (the C core's check of its options; before: OK at step 2 with w = 0).
  fsdp:  two processes, FSDP2 on a CPU mesh over gloo (torch >= 2.8, SKIP otherwise):
         FSDPShardedOneBitAdam on a model whose first bias is frozen trains (before: the first
         backward raised "parameters changed after it was made?"), the frozen bias bit-identical
         to its start and the ranks' parameters identical; with that bias frozen on rank 1 only
         construction fails on both ranks.

Exit status 77 (ctest SKIP_RETURN_CODE) when torch cannot be imported. Each mode takes a few
seconds.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import _testlib
from _testlib import SKIP, expect_raises


def require_torch():
    _testlib.require_torch(terse_python=True)


class Net:
    """An embedding (frozen), a layer never used, and a layer used on even steps only
    (``alternate``; else never)."""

    def __init__(self, torch, alternate=False):
        torch.manual_seed(0)
        self.torch, self.alternate = torch, alternate
        self.emb = torch.nn.Embedding(10, 8)
        self.emb.weight.requires_grad_(False)
        self.body = torch.nn.Linear(8, 16)
        self.unused = torch.nn.Linear(16, 16)
        self.sometimes = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 2)
        self.parts = [self.emb, self.body, self.unused, self.sometimes, self.head]

    def parameters(self):
        return [p for m in self.parts for p in m.parameters()]

    def loss(self, step, rank=0):
        g = self.torch.Generator().manual_seed(100 * step + rank)
        idx = self.torch.randint(0, 10, (16,), generator=g)
        y = self.torch.randn(16, 2, generator=g)
        h = self.torch.tanh(self.body(self.emb(idx)))
        if self.alternate and step % 2 == 0:
            h = self.torch.tanh(self.sometimes(h))
        return self.torch.nn.functional.mse_loss(self.head(h), y)


def unit(args):
    require_torch()
    import torch
    for v in ("TERSE_RANK", "TERSE_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        os.environ.pop(v, None)
    import terse
    import terse.optim
    from terse.sharded_optim import ShardedOneBitAdam
    torch.set_num_threads(1)
    kinds = [("OneBitAdam", lambda ps, **kw: terse.optim.OneBitAdam(ps, **kw)),
             ("ShardedOneBitAdam", lambda ps, **kw: ShardedOneBitAdam(ps, **kw))]
    for name, make in kinds:
        # The frozen embedding and two layers without gradients: AdamW.
        a, b = Net(torch), Net(torch)
        start = [p.detach().clone() for p in a.parameters()]
        oa = make(a.parameters(), lr=1e-2, weight_decay=0.1, codec="none", warmup_steps=8)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
        for t in range(14):
            oa.zero_grad()
            a.loss(t).backward()
            oa.step()
            if t < 8:
                ob.zero_grad()
                b.loss(t).backward()
                ob.step()
            if t == 7:
                d = max((p - q).abs().max().item()
                        for p, q in zip(a.parameters(), b.parameters()))
                assert d < 1e-6, f"{name}: the warm-up differs from torch AdamW by {d}"
                moved = (a.body.weight - start[1]).abs().max().item()
                assert moved > 1e-3, f"{name}: nothing trained ({moved})"
        assert torch.equal(a.emb.weight, start[0]), f"{name}: the frozen embedding moved"
        assert all(torch.equal(p, q) for p, q in zip(a.unused.parameters(), start[3:5])), \
            f"{name}: the layer never used moved"
        assert all(torch.equal(p, q) for p, q in zip(a.sometimes.parameters(), start[5:7])), \
            f"{name}: the other layer never used moved"
        assert oa.frozen_at == 8 and oa.steps == 14, (oa.frozen_at, oa.steps)
        print(f"ok: {name}: 8 warm-up steps equal torch AdamW (max difference {d:.2e}); the "
              f"frozen embedding and the layers never used unchanged bit for bit through 14 "
              f"steps (8 warm-up, 6 compressed)")

        # A layer used on even steps only: each odd step leaves it exactly as it was (its
        # moments see a zero gradient there, unlike AdamW's: docs/optim.md).
        c = Net(torch, alternate=True)
        oc = make(c.parameters(), lr=1e-2, weight_decay=0.1, codec="none", warmup_steps=4)
        for t in range(10):
            before = [p.detach().clone() for p in c.sometimes.parameters()]
            oc.zero_grad()
            c.loss(t).backward()
            oc.step()
            same = all(torch.equal(p, q) for p, q in zip(c.sometimes.parameters(), before))
            assert same == (t % 2 == 1), f"{name}: step {t}: the alternating layer kept={same}"
        print(f"ok: {name}: a layer used every other step is left exactly as it was by each step "
              f"without its gradient (warm-up and compressed phase)")

        # No gradient at all: no step (torch's AdamW takes none either).
        oa.zero_grad()
        oa.step()
        assert oa.steps == 14, f"{name}: a step without gradients counted ({oa.steps})"

        # A parameter unfrozen after the optimizer was made has no state in it.
        a.emb.weight.requires_grad_(True)
        oa.zero_grad()
        a.loss(0).backward()
        expect_raises(ValueError, oa.step, "requires_grad=False", "[0]", "new optimizer")
        assert torch.equal(a.emb.weight, start[0])
        print(f"ok: {name}: a step without gradients is none; a parameter unfrozen later is a "
              f"clear error")

    # A lossy all-gather keeps the exact parameters in the core: a missing gradient is refused.
    a = Net(torch)
    oa = ShardedOneBitAdam(a.parameters(), lr=1e-2, codec="none", warmup_steps=2,
                           param_codec="int8")
    a.loss(1).backward()
    expect_raises(ValueError, oa.step, "param_codec='int8'", "zeros_like")
    print("ok: ShardedOneBitAdam with param_codec int8 refuses a parameter without a gradient")


# ---------------------------------------------------------------------------------------------
# Two processes

def launch(args, mode, world=2, extra_env=None):
    require_torch()
    work = args.work or tempfile.mkdtemp(prefix=f"terse-{mode}-")
    os.makedirs(work, exist_ok=True)
    store = tempfile.mkdtemp(prefix="store-", dir=work)
    envs = []
    for rank in range(world):
        env = dict(os.environ, TERSE_RANK=str(rank), TERSE_WORLD_SIZE=str(world),
                   TERSE_STORE=store, UCX_NET_DEVICES="lo", TERSE_CPU_THREADS="1",
                   OMP_NUM_THREADS="1", TERSE_TIMEOUT_MS="30000", **(extra_env or {}))
        for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(v, None)
        envs.append(env)
    results = []
    for p, out in _testlib.run_workers(__file__, mode, work, envs, args.timeout, "--store", store):
        if p.returncode == SKIP:
            print("SKIP: a rank skipped (see its output)")
            sys.exit(SKIP)
        if p.returncode != 0 or not os.path.exists(out):
            sys.exit(f"FAIL: a rank exited with {p.returncode}")
        with open(out) as f:
            results.append(json.load(f))
    for r, res in enumerate(results):
        for line in res["log"]:
            print(f"rank {r}: {line}")
    failed = [f"rank {r}: {m}" for r, res in enumerate(results) for m in res["failures"]]
    if failed:
        sys.exit("FAIL:\n  " + "\n  ".join(failed))
    return results


class Attempts:
    def __init__(self):
        self.failures, self.log = [], []

    def expect(self, name, build, kind, words, within=10):
        start = time.monotonic()
        try:
            build()
        except Exception as e:  # noqa: BLE001 -- which kind it was is the check
            text = f"{type(e).__name__}: {e}"
            took = time.monotonic() - start
            self.log.append(f"{name}: {text[:300]} ({took:.2f} s)")
            if not isinstance(e, kind) or any(w.lower() not in text.lower() for w in words):
                self.failures.append(f"{name}: expected {kind.__name__} with {words}, got {text}")
            elif took > within:
                self.failures.append(f"{name}: the error took {took:.1f} s")
            return
        self.failures.append(f"{name}: no error (expected {kind.__name__} with {words})")

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"failures": self.failures, "log": self.log}, f)


def same_on_ranks(comm, tensors):
    import torch
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    both = torch.zeros(comm.size * flat.numel())
    both[comm.rank * flat.numel():(comm.rank + 1) * flat.numel()] = flat
    comm.allreduce(both, "none", "sum")
    return all(torch.equal(both[:flat.numel()], both[r * flat.numel():(r + 1) * flat.numel()])
               for r in range(comm.size))


def ranks_worker(args):
    require_torch()
    import torch
    import terse
    import terse.optim
    from terse import TerseError
    from terse.sharded_optim import ShardedOneBitAdam
    torch.set_num_threads(1)
    comm = terse.comm.Communicator()
    rank = comm.rank
    at = Attempts()

    kinds = [("OneBitAdam", terse.optim.OneBitAdam), ("ShardedOneBitAdam", ShardedOneBitAdam)]
    for name, cls in kinds:
        ps = [torch.nn.Parameter(torch.ones(8, 8)), torch.nn.Parameter(torch.ones(64))]
        opt = cls(ps, lr=0.1, codec="none", warmup_steps=4, communicator=comm)

        def split():
            ps[0].grad = torch.ones_like(ps[0])
            ps[1].grad = torch.ones_like(ps[1]) if rank == 0 else None
            opt.step()
        at.expect(f"{name}: a gradient on rank 0 only", split, ValueError,
                  ["parameter(s) 1 (64,) on 1 of 2 ranks", "every rank must leave the same"])
        ps[1].grad = None
        before = ps[1].detach().clone()
        opt.step()   # both ranks leave ps[1] out: a step, ps[1] untouched
        if not (torch.equal(ps[1], before) and not torch.equal(ps[0], torch.ones(8, 8)) and
                same_on_ranks(comm, ps) and opt.steps == 1):
            at.failures.append(f"{name}: the step without ps[1] on both ranks went wrong "
                               f"(steps {opt.steps})")
        at.log.append(f"{name}: after the refused step, one without ps[1] on both ranks: ps[0] "
                      f"moved, ps[1] kept, ranks equal")

    # ShardedOneBitAdam's layout, refusals and options, agreed at construction.
    def params(order):
        a = torch.nn.Parameter(torch.zeros(8, 8))
        b = torch.nn.Parameter(torch.zeros(64))
        return [a, b] if order == 0 else [b, a]

    def mismatched():
        ps = params(rank)
        opt = ShardedOneBitAdam(ps, lr=0.1, codec="none", warmup_steps=2, communicator=comm)
        for p in ps:
            p.grad = torch.full_like(p, 1.0 if rank == 0 else -1.0)
        opt.step()
        at.log.append(f"mismatched order built and stepped: max |p| = "
                      f"{max(p.abs().max().item() for p in ps)}")
    at.expect("ShardedOneBitAdam: another order on rank 1", mismatched, ValueError,
              ["differ between ranks", "rank(s) 1", "same order", "(8, 8)", "(64,)"])

    def refused():
        ps = params(0)
        if rank == 1:
            ps[1] = torch.nn.Parameter(torch.zeros(64, dtype=torch.float64))
        ShardedOneBitAdam(ps, codec="none", communicator=comm)
    if rank == 1:
        at.expect("ShardedOneBitAdam: float64 on rank 1", refused, ValueError,
                  ["float64", "float32"])
    else:
        at.expect("ShardedOneBitAdam: float64 on rank 1", refused, TerseError,
                  ["rank 1 rejected"])

    at.expect("ShardedOneBitAdam: other betas on rank 1",
              lambda: ShardedOneBitAdam(params(0), betas=(0.9, 0.99 if rank else 0.999),
                                        codec="none", communicator=comm),
              ValueError, ["options differ", "rank(s) 1", "betas"])

    # Warm-up 2 on rank 0, 3 on rank 1: the core's check of its options at the first step.
    def warmups():
        w = torch.nn.Parameter(torch.ones(4))
        opt = ShardedOneBitAdam([w], lr=0.01, weight_decay=0.0, codec="int8",
                                warmup_steps=2 + rank, communicator=comm)
        for _ in range(3):
            w.grad = torch.ones_like(w)
            opt.step()
        at.log.append(f"warm-up 2 and 3 stepped 3 times: w = {w.tolist()}")
    at.expect("ShardedOneBitAdam: warm-up 2 on rank 0, 3 on rank 1", warmups, Exception,
              ["warm"])

    t = torch.full((3,), float(rank))
    comm.allreduce(t, "none", "sum")
    if t.tolist() != [1.0, 1.0, 1.0]:
        at.failures.append(f"allreduce after the checks gave {t.tolist()}")
    at.save(args.work)


def ranks(args):
    launch(args, "ranks")
    print("ok: gradients present on some ranks only refused on every rank; ShardedOneBitAdam's "
          "layout, refusals, options and warm-up agreed across ranks")


# ---------------------------------------------------------------------------------------------
# FSDP2

def fsdp_worker(args):
    require_torch()
    import torch
    import torch.distributed as dist
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch {torch.__version__} has no FSDP2 custom comms (2.8 or later): {e}")
        sys.exit(SKIP)
    import terse
    from terse.sharded_optim import FSDPShardedOneBitAdam
    torch.set_num_threads(1)
    rank, world = int(os.environ["TERSE_RANK"]), int(os.environ["TERSE_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.path.join(args.store, "gloo"),
                            rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    comm = terse.comm.Communicator()
    at = Attempts()

    def model(frozen_bias):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3))
        if frozen_bias:
            m[0].bias.requires_grad_(False)
        start = [p.detach().clone() for p in m.parameters()]
        fully_shard(m[0], mesh=mesh)
        fully_shard(m[2], mesh=mesh)
        fully_shard(m, mesh=mesh)
        return m, start

    m, start = model(True)
    opt = FSDPShardedOneBitAdam(m, lr=1e-2, weight_decay=0.1, codec="onebit",
                                error_feedback=True, warmup_steps=3, communicator=comm)
    losses = []
    for t in range(8):
        g = torch.Generator().manual_seed(10 * t + rank)
        x, y = torch.randn(16, 6, generator=g), torch.randn(16, 3, generator=g)
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    full = [p.full_tensor().detach() for p in m.parameters()]
    if not torch.equal(full[1], start[1]):
        at.failures.append("the frozen bias moved")
    if torch.equal(full[0], start[0]) or torch.equal(full[2], start[2]):
        at.failures.append("the trainable weights did not move")
    if not same_on_ranks(comm, full):
        at.failures.append("the ranks' parameters differ")
    if opt.frozen_at != 3 or opt.steps != 8:
        at.failures.append(f"frozen at {opt.frozen_at}, {opt.steps} steps (expected 3, 8)")
    at.log.append(f"frozen bias: 8 steps (3 warm-up), bias unchanged, loss {losses[0]:.4f} -> "
                  f"{losses[-1]:.4f}")

    at.expect("the bias frozen on rank 1 only",
              lambda: FSDPShardedOneBitAdam(model(rank == 1)[0], lr=1e-2, codec="none",
                                            warmup_steps=2, communicator=comm),
              ValueError, ["differ between ranks", "rank(s) 1"])
    def many_units(units):
        m = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(units)])
        for layer in m:
            fully_shard(layer, mesh=mesh)
        return m

    # A buddy copy per unit, every unit's core refreshing over one pair communicator
    # (Communicator::splitOnce): 64 units, more than a world's 62 splits, train past the freeze
    # on both ranks. Before, one split per unit: a ValueError at construction above 62 units.
    def many_units_train():
        many = many_units(64)
        many_opt = FSDPShardedOneBitAdam(many, lr=1e-2, codec="none", warmup_steps=2,
                                         communicator=comm, buddy_copy=True)
        for t in range(4):
            x = torch.randn(4, 2, generator=torch.Generator().manual_seed(100 * t + rank))
            loss = many(x).square().mean()
            many_opt.zero_grad()
            loss.backward()
            many_opt.step()
        if len(many_opt.units) != 64 or many_opt.frozen_at != 2 or many_opt.steps != 4:
            at.failures.append(f"64 units with buddy_copy: {len(many_opt.units)} units, frozen at "
                               f"{many_opt.frozen_at}, {many_opt.steps} steps (expected 64, 2, 4)")
        if not same_on_ranks(comm, [p.full_tensor() for p in many.parameters()]):
            at.failures.append("64 units with buddy_copy: the ranks' parameters differ")
        at.log.append(f"buddy_copy with 64 FSDP units: 4 steps (2 warm-up), loss {loss.item():.4f}")

    try:
        many_units_train()
    except Exception as e:  # noqa: BLE001 -- recorded as the failure it is
        at.failures.append(f"buddy_copy with 64 FSDP units: {type(e).__name__}: {e}")
    at.save(args.work)
    dist.destroy_process_group()


def fsdp(args):
    launch(args, "fsdp")
    print("ok: FSDPShardedOneBitAdam trains a model with a frozen bias (unchanged, ranks equal); "
          "a frozen bias on one rank only fails construction on both; 64 units train with "
          "buddy_copy=True")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["unit", "ranks", "ranks-worker", "fsdp", "fsdp-worker"])
    p.add_argument("--work", default=None)
    p.add_argument("--store", default=None)
    p.add_argument("--timeout", type=int, default=120)
    args = p.parse_args()
    {"unit": unit, "ranks": ranks, "ranks-worker": ranks_worker, "fsdp": fsdp,
     "fsdp-worker": fsdp_worker}[args.mode](args)


if __name__ == "__main__":
    main()
