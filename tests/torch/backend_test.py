#!/usr/bin/env python3
"""terse as a torch.distributed backend (python/terse/backend.py; docs/pytorch.md, "A
torch.distributed backend"; issue 47).

  unit:  one process, a world of one on a HashStore: registration, every collective, the
         options, and the refusals (send/recv, PREMUL_SUM, AVG of integers, bad pg_options).
  ranks --world N: torchrun starts N ranks on "cpu:terse,cuda:gloo" (the device-split form).
         Every collective x dtype x op x sync/async against a reference every rank computes
         from all ranks' inputs (the inputs are seeded by rank): bit-identical where the
         backend is exact (everything but terse's float SUM/AVG, which must be close and whose
         bit-identity is logged), uneven sizes (all_gather, reduce_scatter, all_to_all_single),
         raw float16 bit patterns (NaNs, -0) through all_gather and broadcast; a sub-group of
         ranks 0 and N-1 and DeviceMesh sub-meshes (terse groups of their own); a compressing
         group (int8) whose float SUM is within the codec's bound and whose integer SUM, MIN,
         MAX, broadcast and barrier stay exact; ranks calling mismatched collectives get an error
         on every rank, after which the group still works; send/recv refused.
  terse-run --world N: terse's launcher and store instead of torchrun: terse.backend.
         init_process_group takes rank, size and a torch store beside TERSE_STORE; collectives,
         a group of one, and terse.ddp's process-wide communicator beside the backend.
  train --world N: DDP and FSDP2 with the backend alone (no hooks, no custom comms) against
         the same model on a gloo group: bit-identical parameters on the exact group (at 2
         ranks; at 3 the difference is logged), DDP on an int8 group within 1% of gloo's and on
         an onebit group with error feedback (one residual per bucket) training down.

Exit status 77 (ctest SKIP_RETURN_CODE) when torch cannot be imported.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import zlib

import _testlib
from _testlib import ROOT, SKIP

sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))


def require_torch():
    _testlib.require_torch(terse_python=True)
    import torch
    version = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    if version < (2, 8):
        print(f"SKIP: terse.backend needs torch 2.8 or later; {sys.executable} has "
              f"{torch.__version__}")
        sys.exit(SKIP)


class Checks:
    def __init__(self):
        self.failures, self.log = [], []

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
        return ok

    def expect(self, name, fn, words, within=20):
        start = time.monotonic()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 -- what it says is the check
            text = f"{type(e).__name__}: {e}"
            took = time.monotonic() - start
            self.log.append(f"{name}: {text[:240]} ({took:.2f} s)")
            if any(w.lower() not in text.lower() for w in words):
                self.failures.append(f"{name}: expected an error with {words}, got {text}")
            elif took > within:
                self.failures.append(f"{name}: the error took {took:.1f} s")
            return
        self.failures.append(f"{name}: no error (expected one with {words})")


def close(a, b):
    """Within 1% (or 0.01) of the reference: terse's float sums, whose order may differ."""
    import torch
    return torch.allclose(a.cpu().double(), b.cpu().double(), rtol=1e-2, atol=1e-2)


def same_bits(a, b):
    import torch
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.cpu().contiguous().view(-1).view(torch.uint8),
                       b.cpu().contiguous().view(-1).view(torch.uint8))


# ---------------------------------------------------------------------------------------------
# The matrix

DEVICE = "cpu"  # where matrix() makes its tensors (gpu mode: "cuda")


def inputs(dtype, shape, case, rank, op="SUM"):
    """Rank `rank`'s input for `case` on DEVICE: every rank can make every rank's."""
    return _inputs(dtype, shape, case, rank, op).to(DEVICE)


def _inputs(dtype, shape, case, rank, op):
    import torch
    # crc32, not hash(): str hashes differ between processes (PYTHONHASHSEED).
    g = torch.Generator().manual_seed(zlib.crc32(f"{case}/{rank}".encode()))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if op == "PRODUCT":
            x = 1 + x / 8
        return x.to(dtype)
    lo, hi = (0, 200) if dtype == torch.uint8 else (-50, 50)
    if op == "PRODUCT":
        lo, hi = (1, 4) if dtype == torch.uint8 else (-3, 4)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def reference(op, xs, world):
    import torch
    fn = {"SUM": torch.add, "AVG": torch.add, "PRODUCT": torch.mul, "MIN": torch.minimum,
          "MAX": torch.maximum, "BAND": torch.bitwise_and, "BOR": torch.bitwise_or,
          "BXOR": torch.bitwise_xor}[op]
    if op in ("SUM", "AVG") and xs[0].dtype in (torch.float16, torch.bfloat16, torch.float32):
        acc = xs[0].float()  # terse accumulates these in float32
        for x in xs[1:]:
            acc = acc + x.float()
        return (acc / world if op == "AVG" else acc).to(xs[0].dtype)
    acc = xs[0].clone()
    for x in xs[1:]:
        acc = fn(acc, x)
    return acc / world if op == "AVG" else acc


def matrix(dist, torch, group, rank, world, ck, tag):
    """Every collective x dtype x op x sync/async on `group` against the references."""
    R = dist.ReduceOp
    FLOATS = [torch.float32, torch.float16, torch.bfloat16]
    DTYPES = FLOATS + [torch.float64, torch.int32, torch.int64, torch.uint8, torch.int8,
                       torch.bool]
    stats = {"calls": 0, "close_not_identical": []}

    def run(call, async_op):
        work = call(async_op)
        if async_op:
            assert work is not None
            fut = work.get_future()
            work.wait()
            fut.wait()

    for dtype in DTYPES:
        name = str(dtype)[6:]
        ops = ["SUM", "MIN", "MAX", "PRODUCT"]
        if dtype.is_floating_point:
            ops.append("AVG")
        if dtype in (torch.int32, torch.int64, torch.uint8, torch.int8, torch.bool):
            ops += ["BAND", "BOR", "BXOR"]
        if dtype == torch.bool:
            ops = ["MIN", "MAX", "BAND", "BOR", "BXOR"]
        for op in ops:
            for async_op in (False, True):
                case = f"{tag}-ar-{name}-{op}-{async_op}"
                shape = (7, 3)  # 21 elements: no world size divides it
                xs = [inputs(dtype, shape, case, r, op) for r in range(world)]
                t = xs[rank].clone()
                run(lambda a: dist.all_reduce(t, op=getattr(R, op), group=group, async_op=a),
                    async_op)
                want = reference(op, xs, world)
                stats["calls"] += 1
                terse_float = dtype in FLOATS and op in ("SUM", "AVG")
                if terse_float:
                    ck.check(close(t, want), f"{case}: not close to the reference")
                    if not same_bits(t, want):
                        stats["close_not_identical"].append(case)
                else:
                    ck.check(same_bits(t, want), f"{case}: differs from the reference "
                                                 f"{t.flatten()[:4]} vs {want.flatten()[:4]}")
            # reduce_scatter_tensor, reduce (root world - 1) and uneven reduce_scatter lists
            if op in ("SUM", "MIN", "MAX", "AVG"):
                for async_op in (False, True):
                    case = f"{tag}-rs-{name}-{op}-{async_op}"
                    xs = [inputs(dtype, (world * 5,), case, r, op) for r in range(world)]
                    out = torch.empty(5, dtype=dtype, device=DEVICE)
                    run(lambda a: dist.reduce_scatter_tensor(out, xs[rank].clone(),
                                                             op=getattr(R, op), group=group,
                                                             async_op=a), async_op)
                    want = reference(op, xs, world)[rank * 5:(rank + 1) * 5]
                    ok = close(out, want) \
                        if dtype in FLOATS and op in ("SUM", "AVG") else same_bits(out, want)
                    ck.check(ok, f"{case}: differs from the reference")
                    stats["calls"] += 1
                case = f"{tag}-rsl-{name}-{op}"
                sizes = [r + 2 for r in range(world)]  # uneven parts
                xs = [inputs(dtype, (sum(sizes),), case, r, op) for r in range(world)]
                out = torch.empty(sizes[rank], dtype=dtype, device=DEVICE)
                dist.reduce_scatter(out, list(xs[rank].split(sizes)), op=getattr(R, op),
                                    group=group)
                want = reference(op, xs, world).split(sizes)[rank]
                ok = close(out, want) \
                    if dtype in FLOATS and op in ("SUM", "AVG") else same_bits(out, want)
                ck.check(ok, f"{case}: differs from the reference")
                root = world - 1
                case = f"{tag}-reduce-{name}-{op}"
                xs = [inputs(dtype, (4,), case, r, op) for r in range(world)]
                t = xs[rank].clone()
                dist.reduce(t, group_dst=root, op=getattr(R, op), group=group)
                if rank == root:
                    want = reference(op, xs, world)
                    ok = close(t, want) \
                        if dtype in FLOATS and op in ("SUM", "AVG") else same_bits(t, want)
                    ck.check(ok, f"{case}: differs from the reference")
                stats["calls"] += 2

        # The moving collectives: bit-identical for every dtype.
        for async_op in (False, True):
            case = f"{tag}-ag-{name}-{async_op}"
            xs = [inputs(dtype, (3, 2), case, r) for r in range(world)]
            out = torch.empty((world * 3, 2), dtype=dtype, device=DEVICE)
            run(lambda a: dist.all_gather_into_tensor(out, xs[rank], group=group, async_op=a),
                async_op)
            ck.check(same_bits(out, torch.cat(xs)), f"{case}: all_gather_into_tensor")
            # uneven sizes
            outs = [torch.empty(r + 1, dtype=dtype, device=DEVICE) for r in range(world)]
            xs = [inputs(dtype, (r + 1,), case + "u", r) for r in range(world)]
            run(lambda a: dist.all_gather(outs, xs[rank], group=group, async_op=a), async_op)
            ck.check(all(same_bits(o, x) for o, x in zip(outs, xs)), f"{case}: all_gather")
            t = inputs(dtype, (5,), case + "b", rank)
            want = inputs(dtype, (5,), case + "b", world - 1)
            run(lambda a: dist.broadcast(t, group_src=world - 1, group=group, async_op=a), async_op)
            ck.check(same_bits(t, want), f"{case}: broadcast")
            t = inputs(dtype, (4,), case + "g", rank)
            gl = [torch.empty(4, dtype=dtype, device=DEVICE) for _ in range(world)] \
                if rank == 0 else None
            run(lambda a: dist.gather(t, gl, group_dst=0, group=group, async_op=a), async_op)
            if rank == 0:
                ck.check(all(same_bits(o, inputs(dtype, (4,), case + "g", r))
                             for r, o in enumerate(gl)), f"{case}: gather")
            parts = [inputs(dtype, (3,), case + "s", r) for r in range(world)]
            out = torch.empty(3, dtype=dtype, device=DEVICE)
            run(lambda a: dist.scatter(out, parts if rank == 0 else None, group_src=0, group=group,
                                       async_op=a), async_op)
            ck.check(same_bits(out, parts[rank]), f"{case}: scatter")
            # all_to_all_single with uneven splits: rank s sends s + d + 1 rows to rank d
            sends = [[inputs(dtype, (s + d + 1, 2), f"{case}a{s}{d}", s) for d in range(world)]
                     for s in range(world)]
            inp = torch.cat(sends[rank])
            out = torch.empty((sum(s + rank + 1 for s in range(world)), 2), dtype=dtype,
                              device=DEVICE)
            run(lambda a: dist.all_to_all_single(
                out, inp, output_split_sizes=[s + rank + 1 for s in range(world)],
                input_split_sizes=[rank + d + 1 for d in range(world)], group=group,
                async_op=a), async_op)
            ck.check(same_bits(out, torch.cat([sends[s][rank] for s in range(world)])),
                     f"{case}: all_to_all_single")
            outs = [torch.empty((s + rank + 1, 2), dtype=dtype, device=DEVICE)
                    for s in range(world)]
            run(lambda a: dist.all_to_all(outs, sends[rank], group=group, async_op=a), async_op)
            ck.check(all(same_bits(outs[s], sends[s][rank]) for s in range(world)),
                     f"{case}: all_to_all")
            stats["calls"] += 7
    # Raw float16 bit patterns (NaN payloads, infinities, -0, subnormals) move unchanged.
    g = torch.Generator().manual_seed(rank)
    bits = torch.randint(-32768, 32767, (999,), generator=g, dtype=torch.int16)
    bits[:4] = torch.tensor([0x7E01, -0x8000, 0x7C00, 0x0001], dtype=torch.int16)
    bits = bits.to(DEVICE)
    out = torch.empty(world * 999, dtype=torch.float16, device=DEVICE)
    dist.all_gather_into_tensor(out, bits.view(torch.float16), group=group)
    mine = out.view(torch.int16)[rank * 999:(rank + 1) * 999]
    ck.check(torch.equal(mine, bits), f"{tag}: float16 bit patterns changed by all_gather")
    t = bits.view(torch.float16).clone()
    dist.broadcast(t, group_src=0, group=group)
    g0 = torch.Generator().manual_seed(0)
    want = torch.randint(-32768, 32767, (999,), generator=g0, dtype=torch.int16)
    want = want.to(DEVICE)
    want[:4] = bits[:4]
    ck.check(torch.equal(t.view(torch.int16), want), f"{tag}: broadcast changed bit patterns")
    work = dist.barrier(group=group, async_op=True)
    work.wait()
    dist.barrier(group=group)
    return stats


def mismatches(dist, torch, group, rank, world, ck, tag):
    """Ranks that disagree get an error on every rank, and the group works afterwards."""
    R = dist.ReduceOp
    i = torch.arange(6, dtype=torch.int32)
    f = torch.ones(10 if rank == 0 else 12)
    cases = [
        ("MIN on rank 0, MAX elsewhere",
         lambda: dist.all_reduce(i.clone(), op=R.MIN if rank == 0 else R.MAX, group=group),
         ["different collectives", "rank 0", "rank 1"]),
        ("10 elements on rank 0, 12 elsewhere", lambda: dist.all_reduce(f, group=group),
         ["terse"]),
        ("broadcast on rank 0, all_reduce elsewhere",
         lambda: dist.broadcast(i.clone(), group_src=0, group=group) if rank == 0 else
         dist.all_reduce(i.clone(), group=group), ["different collectives"]),
        ("AVG of int32 on rank 0 (refused there), SUM elsewhere",
         lambda: dist.all_reduce(i.clone(), op=R.AVG if rank == 0 else R.SUM, group=group),
         ["terse"]),
        ("all_to_all_single: rank 0 expects 2 rows from each, the others send 1",
         lambda: dist.all_to_all_single(torch.empty(2 * world if rank == 0 else world),
                                        torch.ones(world), output_split_sizes=[2 if rank == 0
                                                                               else 1] * world,
                                        input_split_sizes=[1] * world, group=group),
         ["split sizes disagree", "which expects 8"]),
        # float all_gather_into_tensor goes straight to terse's allgather (no descriptor):
        # terse's own agreement must catch the sizes.
        ("all_gather_into_tensor of 4 floats on rank 0, 5 elsewhere",
         lambda: dist.all_gather_into_tensor(torch.empty(world * (4 if rank == 0 else 5)),
                                             torch.ones(4 if rank == 0 else 5), group=group),
         ["terse"]),
        ("float32 SUM on rank 0, int32 MAX elsewhere",
         lambda: dist.all_reduce(torch.ones(6) if rank == 0 else i.clone(),
                                 op=R.SUM if rank == 0 else R.MAX, group=group), ["terse"]),
    ]
    for name, fn, words in cases:
        ck.expect(f"{tag}: {name}", fn, words)
        t = torch.full((3,), rank + 1, dtype=torch.int64)
        dist.all_reduce(t, group=group)
        ck.check(t.tolist() == [world * (world + 1) // 2] * 3,
                 f"{tag}: the group after '{name}' gives {t.tolist()}")


def ranks_worker(args):
    require_torch()
    import torch
    import torch.distributed as dist
    import terse.backend
    torch.set_num_threads(1)
    start = time.monotonic()
    dist.init_process_group("cpu:terse,cuda:gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    ck = Checks()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    ck.check(isinstance(backend, terse.backend.TerseBackend), f"the cpu backend is {backend}")
    stats = matrix(dist, torch, None, rank, world, ck, "world")
    ck.log.append(f"world: {stats['calls']} collectives; terse float SUM/AVG not bit-identical "
                  f"to the float32-accumulated reference: {len(stats['close_not_identical'])} "
                  f"({', '.join(stats['close_not_identical'][:6])})")
    mismatches(dist, torch, None, rank, world, ck, "world")

    # A sub-group of the first and last ranks: its own terse communicator.
    members = [0, world - 1]
    sub = dist.new_group(members)
    if rank in members:
        sub_backend = sub._get_backend(torch.device("cpu"))
        ck.check(isinstance(sub_backend, terse.backend.TerseBackend) and
                 sub_backend.comm.size == 2, f"the sub-group's backend is {sub_backend}")
        matrix_sub = matrix(dist, torch, sub, members.index(rank), 2, ck, "sub")
        ck.log.append(f"sub-group {members}: {matrix_sub['calls']} collectives")
        mismatches(dist, torch, sub, members.index(rank), 2, ck, "sub")
    # DeviceMesh sub-meshes become terse groups of their own.
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (1, world), mesh_dim_names=("a", "b"))
    for dim, size in (("a", 1), ("b", world)):
        g = mesh[dim].get_group()
        b = g._get_backend(torch.device("cpu"))
        ck.check(isinstance(b, terse.backend.TerseBackend) and b.comm.size == size,
                 f"mesh dim {dim}: backend {b}")
        t = torch.full((4,), rank + 1)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g)
        ck.check(t.tolist() == [float(world if size == world else rank + 1)] * 4,
                 f"mesh dim {dim}: MAX gives {t.tolist()}")

    # A compressing group: float SUM within int8's bound, the rest exact.
    fast = dist.new_group(pg_options=terse.backend.Options(codec="int8"))
    xs = [inputs(torch.float32, (4096,), "int8", r) for r in range(world)]
    t = xs[rank].clone()
    dist.all_reduce(t, group=fast)
    want = reference("SUM", xs, world)
    err = (t - want).abs().max().item()
    bound = sum(x.abs().max().item() for x in xs) / 127  # half a step per rank's block scale, x2
    ck.check(not same_bits(t, want), "int8 group: the float SUM was not compressed")
    ck.check(err <= bound, f"int8 group: error {err} over the bound {bound}")
    ck.log.append(f"int8 group: float32 SUM max error {err:.4g} (bound {bound:.4g})")
    with terse.backend.group_options(codec="int8"):
        fast2 = dist.new_group()
    ck.check(fast2._get_backend(torch.device("cpu")).terse_options.codec.startswith("int8"),
             "group_options did not reach the group")
    exact = matrix_exact_on(dist, torch, fast, rank, world, ck)
    ck.log.append(f"int8 group: {exact} exact collectives stayed exact")

    capped = dist.new_group(pg_options=terse.backend.Options(codec="onebit", feedback=True,
                                                             max_feedback_states=1))
    a, b = torch.ones(64), torch.ones(32)
    dist.all_reduce(a, group=capped)
    ck.expect("a second residual over max_feedback_states=1",
              lambda: dist.all_reduce(b, group=capped), ["max_feedback_states"])
    dist.all_reduce(a, group=capped)  # the first buffer still works
    ck.expect("send", lambda: dist.send(torch.ones(2), dst=(rank + 1) % world),
              ["point-to-point"])
    ck.expect("recv", lambda: dist.recv(torch.ones(2), src=(rank + 1) % world),
              ["point-to-point"])
    ck.log.append(f"worker took {time.monotonic() - start:.1f} s")
    save(args, rank, ck)


def matrix_exact_on(dist, torch, group, rank, world, ck):
    """On a compressing group: integer SUM, float MIN/MAX, broadcast and barrier stay exact."""
    R = dist.ReduceOp
    n = 0
    for dtype, op in ((torch.int32, "SUM"), (torch.int64, "SUM"), (torch.float32, "MIN"),
                      (torch.float32, "MAX"), (torch.bfloat16, "MAX"), (torch.float64, "SUM")):
        xs = [inputs(dtype, (257,), f"x{dtype}{op}", r) for r in range(world)]
        t = xs[rank].clone()
        dist.all_reduce(t, op=getattr(R, op), group=group)
        ck.check(same_bits(t, reference(op, xs, world)), f"int8 group: {dtype} {op} not exact")
        n += 1
    t = inputs(torch.float32, (300,), "bc", rank)
    dist.broadcast(t, group_src=0, group=group)
    ck.check(same_bits(t, inputs(torch.float32, (300,), "bc", 0)), "int8 group: broadcast")
    dist.barrier(group=group)
    return n + 2


def save(args, rank, ck):
    import torch.distributed as dist
    with open(os.path.join(args.work, f"rank{rank}.json"), "w") as f:
        json.dump({"failures": ck.failures, "log": ck.log}, f)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# Training: DDP and FSDP2 on the backend alone, against gloo

def make_model(torch, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.Tanh(), torch.nn.Linear(64, 4))


def train_ddp(torch, dist, group, rank, steps=6, fixed=False):
    """DDP with SGD on `group`; fixed: one batch per rank every step (so the loss must fall)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = make_model(torch)
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed((0 if fixed else 100 * step) + rank)
        x, y = torch.randn(32, 16, generator=g), torch.randn(32, 4, generator=g)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return [p.detach().clone() for p in model.parameters()], losses


def train_fsdp(torch, mesh, rank, steps=4):
    from torch.distributed.fsdp import fully_shard
    model = make_model(torch)
    for layer in (model[0], model[2], model[4]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(32, 16, generator=g), torch.randn(32, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def train_worker(args):
    require_torch()
    import torch
    import torch.distributed as dist
    import terse.backend
    torch.set_num_threads(1)
    start = time.monotonic()
    dist.init_process_group("terse", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    ck = Checks()
    gloo = dist.new_group(backend="gloo")
    ref, ref_losses = train_ddp(torch, dist, gloo, rank)
    mine, _ = train_ddp(torch, dist, None, rank)
    identical = all(same_bits(a, b) for a, b in zip(ref, mine))
    diff = max((a - b).abs().max().item() for a, b in zip(ref, mine))
    ck.log.append(f"DDP on terse vs gloo, {world} ranks: bit-identical {identical} (max "
                  f"difference {diff:.3g})")
    if world == 2:
        ck.check(identical, f"DDP on the terse group differs from gloo by {diff}")
    else:
        ck.check(diff < 1e-5, f"DDP on terse differs from gloo by {diff}")
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    ck.check(backend.calls.get("all_reduce", 0) > 0 and backend.calls.get("broadcast", 0) > 0,
             f"DDP's calls on the terse group: {backend.calls}")

    int8 = dist.new_group(pg_options=terse.backend.Options(codec="int8"))
    lossy, _ = train_ddp(torch, dist, int8, rank)
    rel = max(((a - b).norm() / b.norm()).item() for a, b in zip(lossy, ref))
    ck.log.append(f"DDP on an int8 group: largest relative parameter difference to gloo {rel:.3g}")
    ck.check(0 < rel < 0.01, f"DDP on the int8 group: relative difference {rel} (bound 1%)")
    onebit = dist.new_group(pg_options=terse.backend.Options(codec="onebit", feedback=True))
    _, losses = train_ddp(torch, dist, onebit, rank, steps=10, fixed=True)
    ob = onebit._get_backend(torch.device("cpu"))
    ck.check(len(ob._feedback) >= 2 and losses[-1] < losses[0],
             f"onebit with feedback: {len(ob._feedback)} residual states, loss {losses[0]:.4f} "
             f"-> {losses[-1]:.4f}")
    ck.log.append(f"DDP on an onebit group with error feedback: {len(ob._feedback)} residual "
                  f"states (one per bucket), loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    try:
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as e:
        ck.log.append(f"FSDP2 skipped: {e}")
    else:
        ref = train_fsdp(torch, DeviceMesh.from_group(gloo, "cpu"), rank)
        mine = train_fsdp(torch, init_device_mesh("cpu", (world,)), rank)
        identical = all(same_bits(a, b) for a, b in zip(ref, mine))
        diff = max((a - b).abs().max().item() for a, b in zip(ref, mine))
        ck.log.append(f"FSDP2 on terse vs gloo, {world} ranks: bit-identical {identical} (max "
                      f"difference {diff:.3g}); terse calls {backend.calls}")
        if world == 2:
            ck.check(identical, f"FSDP2 on the terse group differs from gloo by {diff}")
        else:
            ck.check(diff < 1e-5, f"FSDP2 on terse differs from gloo by {diff}")
    ck.log.append(f"worker took {time.monotonic() - start:.1f} s")
    save(args, rank, ck)


# ---------------------------------------------------------------------------------------------
# unit: a world of one

def unit(args):
    require_torch()
    import torch
    import torch.distributed as dist
    import terse.backend
    ck = Checks()
    ck.check("terse" in dist.Backend.backend_list, "terse is not registered")
    dist.init_process_group("terse", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    stats = matrix(dist, torch, None, 0, 1, ck, "unit")
    ck.check(not stats["close_not_identical"],
             f"a world of one changed float sums: {stats['close_not_identical']}")
    R = dist.ReduceOp
    ck.expect("PREMUL_SUM", lambda: dist.all_reduce(
        torch.ones(2), op=dist._make_nccl_premul_sum(2.0)), ["PREMUL_SUM", "not supported"])
    ck.expect("AVG of int64", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int64),
                                                      op=R.AVG), ["AVG", "integer"])
    ck.expect("BAND of float", lambda: dist.all_reduce(torch.ones(2), op=R.BAND), ["BAND"])
    ck.expect("send", lambda: dist.send(torch.ones(2), dst=1), ["point-to-point"])
    b = dist.group.WORLD._get_backend(torch.device("cpu"))
    ck.expect("backend send", lambda: b.send([torch.ones(2)], 0, 0), ["point-to-point",
                                                                    "gloo"])
    ck.expect("pg_options of another type",
              lambda: dist.new_group(pg_options=object()), ["terse.backend.Options"])
    ck.expect("a bad codec", lambda: terse.backend.Options(codec="zstd"), ["zstd"])
    ck.check(terse.backend.Options("onebit").feedback and not terse.backend.Options().feedback,
             "feedback defaults")
    class BrokenStore:
        def set(self, key, value):
            raise OSError("the disk is full")

        def check(self, keys):
            return False

        def add(self, key, n):
            return 1

        def get(self, key):
            raise KeyError(key)
    from terse.comm import Communicator

    def broken():
        try:
            Communicator.over_store(0, 2, BrokenStore(), "broken", 2000)
        except terse.TerseError as e:
            assert isinstance(e.__cause__, OSError), f"cause {e.__cause__!r}"
            raise
    ck.expect("a store that fails", broken, ["caller's store"])
    ck.expect("rank 3 of 2", lambda: Communicator.over_store(3, 2, BrokenStore()), ["rank 3 of 2"])
    t = torch.arange(6.)
    dist.all_reduce(t)  # still works after the refusals
    ck.check(t.tolist() == [0., 1., 2., 3., 4., 5.], f"after the refusals: {t.tolist()}")
    for line in ck.log:
        print(line)
    if ck.failures:
        sys.exit("FAIL:\n  " + "\n  ".join(ck.failures))
    print(f"ok: a world of one, {stats['calls']} collectives and the refusals")


# ---------------------------------------------------------------------------------------------
# gpu: the matrix on CUDA tensors (needs a GPU; not registered with ctest, run it by hand or
# from a device check: backend_test.py gpu --world 2)

def gpu_worker(args):
    require_torch()
    import torch
    import torch.distributed as dist
    import terse.backend
    from terse import _lib
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        sys.exit(SKIP)
    global DEVICE
    DEVICE = "cuda"
    torch.cuda.set_device(0)  # every rank on cuda:0, where terse's device path runs
    dist.init_process_group("terse", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    ck = Checks()
    stats = matrix(dist, torch, None, rank, world, ck, "gpu")
    backend = dist.group.WORLD._get_backend(torch.device("cuda"))
    ck.log.append(f"gpu: {stats['calls']} collectives on CUDA tensors; library CUDA "
                  f"(built, usable) {_lib.cuda_info()}; staged: {backend.staged_why or 'no'}; "
                  f"float SUM/AVG not bit-identical to the reference: "
                  f"{len(stats['close_not_identical'])}")
    mismatches(dist, torch, None, rank, world, ck, "gpu")
    save(args, rank, ck)


# ---------------------------------------------------------------------------------------------
# terse-run: terse's launcher and store instead of torchrun's

def terse_run_worker(args):
    require_torch()
    import torch
    import torch.distributed as dist
    import terse.backend
    import terse.ddp
    terse.backend.init_process_group(timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    ck = Checks()
    ck.check((rank, world) == (int(os.environ["TERSE_RANK"]),
                               int(os.environ["TERSE_WORLD_SIZE"])), f"rank {rank} of {world}")
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    ck.check(t.tolist() == [world * (world + 1) / 2] * 5, f"float SUM: {t.tolist()}")
    i = torch.tensor([rank, -rank], dtype=torch.int64)
    dist.all_reduce(i, op=dist.ReduceOp.MAX)
    ck.check(i.tolist() == [world - 1, 0], f"int64 MAX: {i.tolist()}")
    # terse's process-wide communicator (TERSE_STORE's own port) lives beside the backend.
    comm = terse.ddp.default_communicator()
    x = torch.ones(4)
    comm.allreduce(x, "none", "sum")
    ck.check(x.tolist() == [float(world)] * 4, f"terse.ddp's communicator: {x.tolist()}")
    sub = dist.new_group([0])
    if rank == 0:
        y = torch.arange(3.)
        dist.all_reduce(y, group=sub)
        ck.check(y.tolist() == [0., 1., 2.], f"a group of one: {y.tolist()}")
    ck.log.append(f"terse-run: rank {rank} of {world}, store {os.environ['TERSE_STORE']}")
    save(args, rank, ck)


def terse_run(args):
    require_torch()
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", TERSE_CPU_THREADS="1", TERSE_TIMEOUT_MS="30000")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "TERSE_STORE"):
        env.pop(v, None)
    cmd = [args.terse_run, "-n", str(args.world), "--", sys.executable,
           os.path.abspath(__file__), "terse-run-worker", "--work", args.work]
    collect(args, cmd, env)


# ---------------------------------------------------------------------------------------------
# Drivers

def run_torchrun(args, mode):
    require_torch()
    import torch
    if mode == "gpu" and not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        sys.exit(SKIP)
    from ddp_hooks import free_port_pair
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", TERSE_CPU_THREADS="1",
               TERSE_TIMEOUT_MS="30000")
    env.setdefault("UCX_NET_DEVICES", "lo")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TERSE_STORE", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.world),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port_pair()),
           os.path.abspath(__file__), f"{mode}-worker", "--work", args.work]
    collect(args, cmd, env, mode)


def collect(args, cmd, env, mode="terse-run"):
    """Runs the launcher's command, then reads and checks every rank's report."""
    for f in os.listdir(args.work):
        if f.startswith("rank") and f.endswith(".json"):
            os.remove(os.path.join(args.work, f))
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, env=env, timeout=args.timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: the ranks did not finish within {args.timeout} s (a rank hung?)")
    results = []
    for r in range(args.world):
        path = os.path.join(args.work, f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                results.append(json.load(f))
    if done.returncode != 0 or len(results) != args.world:
        sys.exit(f"FAIL: the launcher exited with {done.returncode}, {len(results)} ranks "
                 f"reported")
    for r, res in enumerate(results):
        for line in res["log"]:
            print(f"rank {r}: {line}")
    failed = [f"rank {r}: {m}" for r, res in enumerate(results) for m in res["failures"]]
    if failed:
        sys.exit("FAIL:\n  " + "\n  ".join(failed))
    print(f"ok: {mode} on {args.world} ranks ({time.monotonic() - start:.1f} s)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["unit", "ranks", "ranks-worker", "train", "train-worker",
                                    "terse-run", "terse-run-worker", "gpu", "gpu-worker"])
    p.add_argument("--terse-run", default=os.path.join(ROOT, "build", "bin", "terse-run"))
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--work", default="/tmp/terse-backend-test")
    p.add_argument("--timeout", type=int, default=200)
    args = p.parse_args()
    if args.mode == "unit":
        unit(args)
    elif args.mode.endswith("-worker"):
        {"ranks-worker": ranks_worker, "train-worker": train_worker,
         "terse-run-worker": terse_run_worker, "gpu-worker": gpu_worker}[args.mode](args)
    elif args.mode == "terse-run":
        terse_run(args)
    else:
        run_torchrun(args, args.mode)


if __name__ == "__main__":
    main()
