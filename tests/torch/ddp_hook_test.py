#!/usr/bin/env python3
"""Tests of terse's PyTorch DDP communication hook (python/terse/ddp.py).

  ddp:  torchrun starts --world ranks (gloo); each trains a small MLP a few steps with the terse
        hook for every codec (none fp16 bf16 int8 onebit topk). Every bucket the hook reduces is
        checked against the exact float64 average of the ranks' gradients (computed with gloo):
          none, fp16, bf16, int8: |hook - exact| within the codec's documented bound
              (docs/codecs.md) for terse's two compressions (worker, then owner of the chunk);
          onebit, topk (error feedback on): the error-feedback identity
              hook = exact + mean_r(worker residual before - after) + (server residual before -
              after), the residuals read from the state's checkpoint bytes; onebit's output takes
              one magnitude per 2048-element block, topk's has at most k nonzeros per segment;
          every codec: bit-identical to terse's C API allreduce on the same input with a copy of
              the same error-feedback state, and parameters bit-identical on every rank.
        Then the hook state survives a save/load: a checkpoint (torch.save / torch.load) restored
        into the running state reproduces the continued run bit for bit, zeroed residuals do not,
        and a new DDP model with a new state loaded from it takes the residuals up once DDP has
        rebuilt its buckets.
  peer-death: torchrun starts --world ranks training with the hook (--codec, several buckets),
        with or without overlap (--overlap on/off); the last rank exits in the middle of a
        step (inside the hook, between two buckets). Every survivor's backward() must raise
        terse's error well within TERSE_TIMEOUT_MS naming the dead rank, also when the rank it
        waited on was a survivor that failed first (its failure notice carries the cause).
  multinode: --nodes torchrun launchers on this machine, one per emulated node (--nnodes,
        --node_rank, --nproc_per_node --per-node; TERSE_NODE names each node, no UCX_TLS), as
        a multi-node job starts: terse's topology agrees with torchrun's LOCAL_RANK and
        LOCAL_WORLD_SIZE, no launcher warning is logged, and the hook's default algorithm is
        auto's measured choice: every bucket equals terse's allreduce forced to "twolevel" or the
        one forced to "flat" (each with a copy of the error-feedback state, whose residuals then
        match too), and for int8 the two forced ones differ on some bucket; none stays within
        its bound of the exact average, and parameters agree on every rank.
  unit: one process (a world of one): old and new GradBucket APIs, float16/bfloat16 buckets,
        bad dtypes, codecs and checkpoints give clear errors, bucket-layout tracking, the library
        search, CUDA buckets (skipped without a GPU).
  pip:  `pip install --no-build-isolation --target` of python/ (a copy) works and the installed
        package finds libterse.so through TERSE_LIBRARY and through the dynamic loader.
  example: examples/pytorch/ddp_hooks.py compare runs on a tiny model with 2 ranks (every kind
        of hook) and writes its results.

Exit status 77 (ctest SKIP_RETURN_CODE) when torch cannot be imported.
"""
import argparse
import copy
import functools
import math
import os
import re
import shutil
import subprocess
import sys
import warnings

import _testlib
from _testlib import ROOT, SKIP, FakeBucket, expect_raises

CODECS = ["none", "fp16", "bf16", "int8", "onebit", "topk"]
# auto within the lossy budget of int8 (none, fp16, bf16, int8: no error feedback): the ddp test
# holds it to the bound of whichever of those it picks; the unit test runs both budgets.
AUTO_INT8 = "auto:max=int8"
AUTOS = [AUTO_INT8, "auto:max=onebit"]
# The low-bit codecs (issue #20) in the hook's unit matrix: fp8/mxfp8 without residuals,
# mxfp4/int4 with them (terse_codec_info decides).
LOWBIT = ["fp8", "fp8:format=e5m2", "mxfp8", "mxfp4", "int4"]
STEPS = 5           # training steps per codec in the ddp test
SEGMENT_ELEMS = 65536  # TERSE_SEGMENT_BYTES below: buckets over 65536 elements take several
CHUNK_ALIGN = 2048     # collectives/include/terse/collectives/engine.h, kChunkAlign

# One port picker for the tests and the example they drive (its module imports torch lazily).
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
from ddp_hooks import free_port_pair  # noqa: E402


def require_torch():
    _testlib.require_torch(_testlib.DEBIAN_HINT, gloo=True)


# ---------------------------------------------------------------------------------------------
# Shared by the modes

def make_model(seed=0):
    import torch
    import torch.nn as nn
    torch.manual_seed(seed)
    # 301,066 parameters (1.2 MB): PyTorch >= 1.13 caps DDP's first bucket at 1 MB, so with
    # bucket_cap_mb=0.1 there are several buckets, the first of them several pipeline segments.
    return nn.Sequential(nn.Linear(64, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(),
                         nn.Linear(512, 10))


def batch(step, rank):
    """A deterministic minibatch: inputs and the labels of a fixed random teacher."""
    import torch
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 64, generator=g)
    teacher = torch.randn(64, 10, generator=torch.Generator().manual_seed(7))
    y = (x @ teacher + 0.5 * torch.randn(32, 10, generator=g)).argmax(dim=1)
    return x, y


def residuals(data):
    """(worker, server, header) float64 residual arrays of a serialized Feedback
    (docs/wire-format.md, "Error-feedback checkpoint")."""
    import torch
    import terse
    h = terse.parse_feedback_header(data)
    off = 40 + (len(h["spec"].encode()) + 3) // 4 * 4
    buf = bytearray(data)
    worker = torch.frombuffer(buf, dtype=torch.float32, count=h["count"], offset=off)
    server = torch.frombuffer(buf, dtype=torch.float32, count=h["server_length"],
                              offset=off + 4 * h["count"]) if h["server_length"] else \
        torch.zeros(0)
    return worker.double().clone(), server.double().clone(), h


def aligned_chunk(count, n, j, align=CHUNK_ALIGN):
    """collectives/include/terse/collectives/partition.h, alignedChunkRange."""
    units = (count + align - 1) // align
    base, extra = divmod(units, n)
    b = j * base + min(j, extra)
    e = b + base + (1 if j < extra else 0)
    return min(count, b * align), min(count, e * align)


# ---------------------------------------------------------------------------------------------
# ddp: the distributed test, one process per rank under torchrun

class Checker:
    """Wraps terse_hook: reduces each bucket through it and checks the result."""

    def __init__(self, state, codec):
        import torch.distributed as dist
        self.state, self.codec = state, codec
        self.n, self.rank = dist.get_world_size(), dist.get_rank()
        self.buckets = 0
        self.worst = 0.0  # largest |hook - reference| / allowed seen

    def hook(self, state, bucket):
        import torch
        import torch.distributed as dist
        import terse
        from terse.ddp import terse_hook, _bucket_tensor, _bucket_index
        tensor = _bucket_tensor(bucket)
        index = _bucket_index(bucket)
        x = tensor.detach().clone()
        fb = state._feedback_for(index, bucket, tensor) if state.error_feedback else None
        before = fb.to_bytes() if fb is not None else None
        fut = terse_hook(state, bucket)
        fut.wait()  # with overlap the reduction runs on terse's thread; the checks need it done
        out = fut.value().detach().clone()
        assert out.data_ptr() == tensor.data_ptr() or torch.equal(out, tensor)
        after = fb.to_bytes() if fb is not None else None
        self.buckets += 1

        # The C API on the same input, with a copy of the same error-feedback state.
        copy_fb = terse.Feedback.from_bytes(before) if before is not None else None
        replay = state.comm.allreduce(x.clone(), state.spec, "avg", copy_fb)
        assert torch.equal(replay, out), \
            f"{self.codec} bucket {index}: the hook differs from terse_allreduce on its input"
        if copy_fb is not None:
            assert copy_fb.to_bytes() == after, \
                f"{self.codec} bucket {index}: residuals differ from terse_allreduce's"

        xs = [torch.zeros_like(x, dtype=torch.float64) for _ in range(self.n)]
        dist.all_gather(xs, x.double())
        exact = sum(xs) / self.n
        o = out.double()
        if self.codec in ("onebit", "topk"):
            err, allowed = self.ef_identity(o, x.double(), exact, before, after)
            self.structure(o, index)
        else:
            err, allowed = o - exact, self.bound(xs, exact)
        ratio = (err.abs() / allowed).max().item() if x.numel() else 0.0
        self.worst = max(self.worst, ratio)
        assert ratio <= 1.0, (f"{self.codec} bucket {index} ({x.numel()} elements): error "
                              f"{ratio:.3f} times the allowed bound")
        return fut

    def bound(self, xs, exact):
        """Per-element bound on |hook - exact| for the casting codecs (docs/codecs.md): each rank's
        contribution is compressed once, the owner of a chunk compresses the float32 sum times
        1/n once more, and float32 accumulation adds a few roundings."""
        import torch
        n = self.n
        if self.codec == AUTO_INT8:
            # Whatever auto picked for this bucket, it is one of these four.
            picks = ("none", "fp16", "bf16", "int8")
            return functools.reduce(torch.maximum, (Checker.bound_of(c, n, xs, exact)
                                                    for c in picks))
        return Checker.bound_of(self.codec, n, xs, exact)

    @staticmethod
    def bound_of(codec, n, xs, exact):
        import torch
        f32 = 2.0 ** -24
        absx = [a.abs() for a in xs]
        mean_abs = sum(absx) / n
        if codec == "none":
            return 4 * n * f32 * mean_abs + 4 * f32 * exact.abs() + 1e-38
        if codec in ("fp16", "bf16"):
            u, tiny = (2.0 ** -11, 2.0 ** -25) if codec == "fp16" else (2.0 ** -8, 1e-38)
            worker = sum(torch.maximum(a * u, torch.full_like(a, tiny)) for a in absx) / n
            s = exact.abs() + worker
            server = torch.maximum(s * u, torch.full_like(s, tiny))
            return (worker + server + (n + 2) * f32 * (mean_abs + s)) * 1.001
        if codec == "int8":
            block = 256

            def block_max(a):
                pad = (-a.numel()) % block
                m = torch.nn.functional.pad(a, (0, pad)).view(-1, block).max(dim=1).values
                return m.repeat_interleave(block)[:a.numel()]
            worker = sum(block_max(a) for a in absx) / (254 * n)
            s = exact.abs() + worker
            server = block_max(s) / 254
            return (worker + server + (n + 2) * f32 * (mean_abs + s)) * 1.001 + 1e-30
        raise AssertionError(codec)

    def ef_identity(self, out, x, exact, before, after):
        """Error feedback loses nothing: what the hook returned plus what the ranks kept back
        equals the exact average plus what they had kept back before. Returns (error, allowed)."""
        import torch
        import torch.distributed as dist
        wb, sb, hb = residuals(before)
        wa, sa, ha = residuals(after)
        count = x.numel()
        lo, hi = aligned_chunk(count, self.n, self.rank)
        assert (ha["server_offset"], ha["server_length"]) == (lo, hi - lo), \
            f"server residual covers {ha['server_offset']}+{ha['server_length']}, not [{lo},{hi})"
        if (hb["server_world"], hb["server_offset"], hb["server_length"]) != \
                (ha["server_world"], ha["server_offset"], ha["server_length"]):
            sb = torch.zeros_like(sa)  # a new partition starts from zero (docs/codecs.md)
        sd = torch.zeros(count, dtype=torch.float64)
        sd[lo:hi] = sb - sa
        smag = torch.zeros(count, dtype=torch.float64)
        smag[lo:hi] = sb.abs() + sa.abs()
        wd, wmag = wb - wa, x.abs() + wb.abs() + wa.abs()
        for t in (wd, wmag, sd, smag):
            dist.all_reduce(t)
        expected = exact + wd / self.n + sd
        allowed = 2.0 ** -19 * (wmag / self.n + smag + out.abs() + exact.abs()) + 1e-38
        assert wa.abs().max() > 0, f"{self.codec}: compression left no worker residual"
        return out - expected, allowed

    def structure(self, out, index):
        import torch
        count = out.numel()
        if self.codec == "onebit":
            # The owner's compression sends one magnitude per 2048-element block (chunks start on
            # multiples of 2048, segments on multiples of 65536, so blocks are global).
            for b in range(0, count, 2048):
                mags = torch.unique(out[b:b + 2048].abs())
                assert mags.numel() == 1, \
                    f"onebit bucket {index} block {b}: {mags.numel()} magnitudes, not 1"
        else:
            limit = 0
            for j in range(self.n):
                lo, hi = aligned_chunk(count, self.n, j)
                for s in range(lo, hi, SEGMENT_ELEMS):
                    length = min(hi, s + SEGMENT_ELEMS) - s
                    limit += min(length, max(1, round(0.01 * length)))
            nnz = int((out != 0).sum())
            assert 0 < nnz <= limit, f"topk bucket {index}: {nnz} nonzeros, k sums to {limit}"


def train(ddp, opt, steps, rank, first=0):
    import torch
    import torch.distributed as dist
    losses = []
    for s in range(first, first + steps):
        x, y = batch(s, rank)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(t.item() / dist.get_world_size())
    return losses


def flat_params(model):
    import torch
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def same_everywhere(t, what):
    import torch
    import torch.distributed as dist
    ts = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(ts, t)
    for r, other in enumerate(ts):
        assert torch.equal(other, ts[0]), f"{what}: rank {r} differs from rank 0"


def end_worker():
    """Ends a torchrun worker that passed. Neither exiting with the gloo group alive nor
    destroy_process_group() ends a 1.13 gloo job reliably (examples/pytorch/ddp_hooks.py,
    finish()): wait for every rank, close terse, then skip the teardown."""
    import torch.distributed as dist
    import terse.ddp
    dist.barrier()
    terse.ddp.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def new_ddp(seed=0):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = make_model(seed)
    ddp = DDP(model, bucket_cap_mb=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, ddp, opt


def ddp_worker(args):
    import torch
    import torch.distributed as dist
    import terse
    import terse.ddp
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    comm = terse.ddp.default_communicator()
    assert (comm.rank, comm.size) == (rank, n), f"terse says {comm}, torch rank {rank} of {n}"
    store = os.environ.get("MASTER_ADDR"), int(os.environ["MASTER_PORT"])
    if rank == 0:
        print(f"torch {torch.__version__}, terse {terse.version()} from {terse.library_path()}; "
              f"{n} ranks; torch's store on {store[0]}:{store[1]}, terse's on "
              f"{store[0]}:{store[1] + 1}", flush=True)

    summary = []
    for codec in CODECS + [AUTO_INT8]:
        model, ddp, opt = new_ddp()
        state = terse.ddp.TerseState(codec)
        checker = Checker(state, codec)
        ddp.register_comm_hook(state, checker.hook)
        losses = train(ddp, opt, STEPS, rank)
        same_everywhere(flat_params(model), f"{codec}: parameters after {STEPS} steps")
        assert all(math.isfinite(v) for v in losses), f"{codec}: losses {losses}"
        assert state.calls == checker.buckets and state.calls >= STEPS
        overlapped = overlap_run(codec, rank, flat_params(model), losses)
        summary.append((codec, state.spec, state.error_feedback, checker.buckets,
                        len(state._buckets), checker.worst, losses[0], losses[-1], overlapped))
    if rank == 0:
        print(f"{'codec':<38}{'EF':<4}{'buckets':>8}{'layouts':>8}{'worst err/bound':>16}"
              f"{'loss 1st':>10}{'loss last':>10}{'pending':>9}")
        for codec, spec, ef, b, nb, worst, l0, l1, pend in summary:
            print(f"{spec:<38}{'yes' if ef else 'no':<4}{b:>8}{nb:>8}{worst:>16.3f}{l0:>10.4f}"
                  f"{l1:>10.4f}{pend:>9}")
        print("pending: buckets whose future was still pending when the overlapping hook "
              "returned (rank 0)", flush=True)
    base = summary[0][7]
    for codec, _, _, _, _, _, _, last, _ in summary[1:4] + summary[6:]:
        assert abs(last / base - 1) < 0.01, f"{codec}: final loss {last} vs none's {base}"

    for codec in ("onebit", "topk"):
        save_load(args, codec, rank, n)
    dist.barrier()
    if rank == 0:
        print("PASS", flush=True)
    end_worker()


def overlap_run(codec, rank, checked_params, checked_losses):
    """Trains the same steps through the plain hook, which overlaps (terse's thread reduces each
    bucket while backward goes on), and through a state that does not; both must end with the
    checked run's parameters and losses bit for bit. Returns how many of the overlapping hook's
    futures were still pending when it returned."""
    import threading
    import torch
    import terse.ddp
    results = {}
    pending = 0
    for overlap in (True, False):
        model, ddp, opt = new_ddp()
        state = terse.ddp.TerseState(codec, overlap=overlap)
        returned = []

        def hook(st, bucket):
            fut = terse.ddp.terse_hook(st, bucket)
            returned.append(fut.done())
            return fut
        ddp.register_comm_hook(state, hook)
        losses = train(ddp, opt, STEPS, rank)
        results[overlap] = (flat_params(model), losses)
        if overlap:
            pending = returned.count(False)
            worker = state.comm._worker
            assert worker is not None and worker != threading.get_ident(), \
                f"{codec}: the overlapping hook did not reduce on terse's thread"
        else:
            assert all(returned), f"{codec}: overlap=False returned a pending future"
    for overlap, (params, losses) in results.items():
        assert torch.equal(params, checked_params) and losses == checked_losses, \
            f"{codec}: training with overlap={overlap} differs from the checked run"
    return pending


def save_load(args, codec, rank, n):
    import torch
    import torch.distributed as dist
    import terse.ddp
    model, ddp, opt = new_ddp()
    state = terse.ddp.register(ddp, codec)
    train(ddp, opt, 4, rank)
    path = os.path.join(args.work, f"{codec}-rank{rank}.pt")
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                "terse": state.state_dict()}, path)
    ckpt = torch.load(path)  # (1.13's weights_only cannot read the optimizer's floats)
    saved = ckpt["terse"]
    assert saved["rank"] == rank and saved["world_size"] == n and len(saved["buckets"]) >= 2
    for index, item in saved["buckets"].items():
        w, s, _ = residuals(item["feedback"].numpy().tobytes())
        assert w.abs().max() > 0, f"{codec}: bucket {index} saved without residuals"

    cont = train(ddp, opt, 3, rank, first=4)
    want = flat_params(model).clone()

    # Restored into the running state: the continuation repeats bit for bit.
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optim"])
    claimed = state.claimed
    state.load_state_dict(ckpt["terse"])
    again = train(ddp, opt, 3, rank, first=4)
    assert state.claimed - claimed == len(saved["buckets"]), "loaded residuals were not used"
    assert torch.equal(flat_params(model), want) and again == cont, \
        f"{codec}: restored run differs from the continued one"

    # Control: the same restore with zeroed residuals does not repeat it (the state matters).
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optim"])
    state.load_state_dict(ckpt["terse"])
    state.reset()
    train(ddp, opt, 3, rank, first=4)
    assert not torch.equal(flat_params(model), want), f"{codec}: zeroed residuals changed nothing"

    # A new model and state, as after a restart: DDP's first step uses its initial bucket order,
    # the checkpoint (saved after DDP rebuilt its buckets) is taken up from the second step on.
    model2, ddp2, opt2 = new_ddp(seed=1)
    model2.load_state_dict(ckpt["model"])
    opt2.load_state_dict(ckpt["optim"])
    state2 = terse.ddp.TerseState(codec)
    state2.load_state_dict(ckpt["terse"])
    # The round trip of an unused loaded state gives the same bytes back.
    for index, item in state2.state_dict()["buckets"].items():
        assert torch.equal(item["feedback"], saved["buckets"][index]["feedback"])
    ddp2.register_comm_hook(state2, terse.ddp.terse_hook)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "made for another bucket layout" warning
        train(ddp2, opt2, 2, rank, first=4)
    assert state2.claimed == len(saved["buckets"]), \
        f"{codec}: {state2.claimed} of {len(saved['buckets'])} checkpointed buckets taken up"
    same_everywhere(flat_params(model2), f"{codec}: restarted parameters")
    dist.barrier()
    if rank == 0:
        print(f"save/load {codec}: {len(saved['buckets'])} buckets; restored run repeats the "
              f"continued one bit for bit; zeroed residuals do not; a new state takes the "
              f"checkpoint up after DDP's rebuild", flush=True)


def torchrun_env(extra_env):
    """The environment of the torchrun launchers: this checkout's python/ first, one terse
    thread per rank, loopback for UCX, and no TERSE_STORE (the point: terse finds its store
    from torchrun's variables)."""
    env = dict(os.environ, **extra_env)
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.setdefault("TERSE_CPU_THREADS", "1")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TERSE_STORE", None)
    return env


def run_torchrun(args, worker_mode, extra_env, worker_args=()):
    """Runs this file's `worker_mode` on --world ranks under torchrun on loopback; exits with
    FAIL when the ranks fail or do not finish within --timeout (a hang)."""
    os.makedirs(args.work, exist_ok=True)
    port = free_port_pair()
    env = torchrun_env(extra_env)
    # --redirects/--tee 1: Debian's torch 1.13 under Python 3.11 cannot parse the default "0"
    # (IntFlag iteration skips zero), so stdout is teed through a log directory instead.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.world),
           "--master_addr", "127.0.0.1", "--master_port", str(port),
           "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(args.work, "logs"),
           os.path.abspath(__file__), worker_mode, "--work", args.work, *worker_args]
    print("+", " ".join(cmd), flush=True)
    try:
        done = subprocess.run(cmd, env=env, timeout=args.timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: the ranks did not finish within {args.timeout} s (a rank hung?)")
    if done.returncode != 0:
        sys.exit(f"FAIL: torchrun exited with {done.returncode}")


def ddp_driver(args):
    run_torchrun(args, "ddp-worker", {"TERSE_SEGMENT_BYTES": str(SEGMENT_ELEMS * 4)})


# ---------------------------------------------------------------------------------------------
# multinode: torchrun's multi-node launch, emulated with one launcher per node on this machine

MULTINODE_CODECS = ["none", "int8", "onebit", "mxfp4"]


def multinode_driver(args):
    """Starts one torchrun per emulated node, as a job over --nodes hosts would; exits with FAIL
    when any fails, hangs or terse warned that the launcher and its node keys disagree."""
    os.makedirs(args.work, exist_ok=True)
    port = free_port_pair()
    env = torchrun_env({"TERSE_SEGMENT_BYTES": str(SEGMENT_ELEMS * 4)})
    env.pop("UCX_TLS", None)  # the two levels pick shared memory and the network themselves
    procs, logs = [], []
    for node in range(args.nodes):
        log_dir = os.path.join(args.work, f"node{node}")
        shutil.rmtree(log_dir, ignore_errors=True)
        logs.append(log_dir)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(args.nodes),
               "--node_rank", str(node), "--nproc_per_node", str(args.per_node),
               "--master_addr", "127.0.0.1", "--master_port", str(port),
               "--redirects", "1", "--tee", "1", "--log_dir", log_dir,
               os.path.abspath(__file__), "multinode-worker", "--work", args.work]
        if node == 0:
            print("+", " ".join(cmd), f"(and node_rank 1..{args.nodes - 1})", flush=True)
        # terse logs to stderr, which torchrun passes through: keep each node's in a file.
        os.makedirs(log_dir)
        err = open(os.path.join(log_dir, "stderr.txt"), "w")
        procs.append(subprocess.Popen(cmd, env=dict(env, TERSE_NODE=f"emulated-host-{node}"),
                                      stderr=err, start_new_session=True))
        err.close()
    failed = None
    for node, proc in enumerate(procs):
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rc = "a hang"
        if rc != 0 and failed is None:
            failed = f"node {node}'s torchrun exited with {rc}"
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    text = ""
    for log_dir in logs:
        with open(os.path.join(log_dir, "stderr.txt"), errors="replace") as f:
            text += f.read()
    if failed:
        print(text[-8000:])
        sys.exit(f"FAIL: {failed}")
    warned = [line for line in text.splitlines() if "WARN" in line and "launcher" in line]
    if warned:
        sys.exit("FAIL: terse's topology disagreed with torchrun's:\n" + "\n".join(warned))
    print("PASS")


def multinode_worker(args):
    import torch
    import torch.distributed as dist
    import terse
    import terse.ddp
    from terse.ddp import terse_hook, _bucket_tensor, _bucket_index
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    local_size = int(os.environ["LOCAL_WORLD_SIZE"])
    comm = terse.ddp.default_communicator()
    mine = torch.tensor([comm.rank, comm.size, comm.local_rank, comm.local_size, comm.node,
                         comm.node_count, int(os.environ["LOCAL_RANK"]),
                         int(os.environ["GROUP_RANK"])])
    every = [torch.zeros_like(mine) for _ in range(n)]
    dist.all_gather(every, mine)
    nodes = n // local_size
    for r, t in enumerate(every):
        t_rank, size, lrank, lsize, node, count, launcher_lrank, group = t.tolist()
        assert (t_rank, size, lsize, count) == (r, n, local_size, nodes), \
            f"rank {r}: terse says rank {t_rank} of {size}, local size {lsize}, {count} nodes"
        assert lrank == launcher_lrank, f"rank {r}: terse's local rank {lrank}, torchrun's " \
                                        f"{launcher_lrank}"
        same = [o.tolist()[4] for o in every if o.tolist()[7] == group]
        assert same == [node] * local_size, f"node_rank {group}'s ranks are on terse nodes {same}"
    assert len({t.tolist()[4] for t in every}) == nodes
    if rank == 0:
        print(f"terse topology: {nodes} nodes x {local_size} ranks, as torchrun launched them",
              flush=True)

    summary = []
    for codec in MULTINODE_CODECS:
        model, ddp, opt = new_ddp()
        state = terse.ddp.TerseState(codec)
        checked = {"buckets": 0, "flat_differs": 0, "worst": 0.0}

        def hook(state, bucket, codec=codec, checked=checked):
            tensor = _bucket_tensor(bucket)
            x = tensor.detach().clone()
            fb = state._feedback_for(_bucket_index(bucket), bucket, tensor) \
                if state.error_feedback else None
            before = fb.to_bytes() if fb is not None else None
            fut = terse_hook(state, bucket)
            fut.wait()
            out = fut.value().detach().clone()
            # auto (the hook's default) runs what it measured faster on these links: the bucket
            # must be one of the two algorithms' results, residuals included.
            replays = {}
            for algo in ("twolevel", "flat"):
                copy_fb = terse.Feedback.from_bytes(before) if before is not None else None
                got = state.comm.allreduce(x.clone(), state.spec, "avg", copy_fb, algorithm=algo)
                replays[algo] = (got, copy_fb)
            ran = [a for a, (got, _) in replays.items() if torch.equal(got, out)]
            assert ran, f"{codec}: the hook's bucket is neither two-level's nor flat's"
            copy_fb = replays[ran[0]][1]
            if copy_fb is not None:
                assert copy_fb.to_bytes() == fb.to_bytes(), f"{codec}: residuals differ"
            if codec == "int8":
                checked["flat_differs"] += int(not torch.equal(replays["flat"][0],
                                                               replays["twolevel"][0]))
            if codec == "none":
                xs = [torch.zeros_like(x, dtype=torch.float64) for _ in range(n)]
                dist.all_gather(xs, x.double())
                exact = sum(xs) / n
                allowed = Checker.bound_of("none", n, xs, exact)
                ratio = ((out.double() - exact).abs() / allowed).max().item() if x.numel() else 0
                checked["worst"] = max(checked["worst"], ratio)
                assert ratio <= 1.0, f"none: error {ratio:.3f} times the bound"
            checked["buckets"] += 1
            return fut

        ddp.register_comm_hook(state, hook)
        losses = train(ddp, opt, STEPS, rank)
        same_everywhere(flat_params(model), f"{codec}: parameters after {STEPS} steps")
        assert all(math.isfinite(v) for v in losses), f"{codec}: losses {losses}"
        assert checked["buckets"] >= STEPS
        summary.append((codec, checked, losses[-1]))
    int8 = next(c for name, c, _ in summary if name == "int8")
    # Four ranks, two per node: two-level compresses each node's sum once, flat each rank's
    # contribution, so the results differ on almost every bucket; equal on all would mean the
    # "twolevel" replay ran flat too (and the check above could not tell which auto ran).
    assert int8["flat_differs"] > 0, "int8: flat and two-level agreed on every bucket"
    base = summary[0][2]
    assert abs(summary[1][2] / base - 1) < 0.01, f"int8's final loss {summary[1][2]} vs {base}"
    if rank == 0:
        for codec, c, last in summary:
            print(f"{codec:<8} buckets {c['buckets']:>3}  final loss {last:.4f}" +
                  (f"  worst err/bound {c['worst']:.3f}" if codec == "none" else "") +
                  (f"  differs from flat on {c['flat_differs']}" if codec == "int8" else ""),
                  flush=True)
        print("PASS", flush=True)
    end_worker()


# ---------------------------------------------------------------------------------------------
# peer-death: a rank dies mid-step; the others' backward() fails naming it

DEATH_TIMEOUT_MS = 30000   # TERSE_TIMEOUT_MS for the ranks: detection must come well before it
DEATH_STEP = 3             # the victim dies in this step's hook, before its second bucket


def peer_death_driver(args):
    import json
    os.makedirs(args.work, exist_ok=True)
    for name in os.listdir(args.work):
        if name.startswith("death-"):
            os.remove(os.path.join(args.work, name))
    run_torchrun(args, "peer-death-worker", {"TERSE_TIMEOUT_MS": str(DEATH_TIMEOUT_MS)},
                 ["--overlap", args.overlap, "--codec", args.codec])
    victim = args.world - 1
    named = set()
    for rank in range(args.world):
        path = os.path.join(args.work, f"death-{rank}.json")
        if not os.path.exists(path):
            sys.exit(f"FAIL: rank {rank} wrote no result ({path})")
        with open(path) as f:
            r = json.load(f)
        print(f"rank {rank}: {r}", flush=True)
        if rank == victim:
            assert r["died_in_step"] == DEATH_STEP, r
            continue
        assert r["failed_in_step"] == DEATH_STEP, \
            f"rank {rank}: backward() of step {DEATH_STEP} should fail: {r}"
        # torch 1.13: a RuntimeError naming TerseError; 2.x: the TerseError itself.
        assert r["type"] == "TerseError" or (r["type"] == "RuntimeError" and
                                             "TerseError" in r["error"]), r
        # The rank it waited on: the victim, or (as in a ring) a survivor that failed first and
        # gave up, which drops its connections so that the failure travels on at once. Such a
        # survivor sends its reason first (failure notices), so every error names the victim.
        m = re.search(r"(?:receive from|send to) rank (\d+)", r["error"])
        assert m and int(m.group(1)) != rank, f"rank {rank}: no peer named: {r['error']}"
        named.add(int(m.group(1)))
        assert re.search(rf"\brank {victim}\b", r["error"]), \
            f"rank {rank}: the error does not name rank {victim}, where it began: {r['error']}"
        assert r["seconds"] < DEATH_TIMEOUT_MS / 1000 / 2, \
            f"rank {rank}: {r['seconds']:.1f} s to fail; TERSE_TIMEOUT_MS is {DEATH_TIMEOUT_MS}"
    print(f"PASS: overlap={args.overlap}, {args.codec}: every survivor's backward() raised "
          f"terse's error within {DEATH_TIMEOUT_MS / 2000:.0f} s naming rank {victim}; the "
          f"ranks they waited on: {sorted(named)}", flush=True)


def peer_death_worker(args):
    import json
    import time
    import torch
    import torch.distributed as dist
    import terse.ddp
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    victim = n - 1
    model, ddp, opt = new_ddp()
    state = terse.ddp.TerseState(args.codec, overlap=args.overlap == "on")
    step = [0]

    def write(result):
        with open(os.path.join(args.work, f"death-{rank}.json"), "w") as f:
            json.dump(result, f)

    def hook(st, bucket):
        from terse.ddp import _bucket_index
        if rank == victim and step[0] == DEATH_STEP and _bucket_index(bucket) == 1:
            write({"died_in_step": step[0]})
            os._exit(0)  # exit 0: torchrun would otherwise stop the survivors itself
        return terse.ddp.terse_hook(st, bucket)
    ddp.register_comm_hook(state, hook)
    result = {"failed_in_step": None}
    for s in range(DEATH_STEP + 2):
        step[0] = s
        x, y = batch(s, rank)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        start = time.monotonic()
        try:
            loss.backward()
        except Exception as e:  # what a training script sees
            result = {"failed_in_step": s, "type": type(e).__name__, "error": str(e)[:2000],
                      "seconds": time.monotonic() - start}
            break
        opt.step()
    write(result)
    # Stay until every survivor has its result: a survivor that exits closes its connections,
    # and one still inside the collective would then (rightly) blame that survivor, not the
    # victim. The failed communicator and the gloo group (whose peer is gone) are not torn down.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(args.work, f"death-{r}.json")) for r in range(n)):
        time.sleep(0.05)
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# unit: a world of one

class OldBucket:
    """GradBucket's interface before PyTorch 1.10 (get_tensor / get_index, no parameters)."""

    def __init__(self, tensor, index):
        self._t, self._i = tensor, index

    def get_tensor(self):
        return self._t

    def get_index(self):
        return self._i


def unit(args):
    import torch
    import terse
    import terse.ddp
    from terse.ddp import TerseState, terse_hook
    for v in ("RANK", "WORLD_SIZE", "TERSE_RANK", "TERSE_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        assert v not in os.environ, f"unit mode runs as a world of one; unset {v}"
    checks = []

    # Library search: an explicit TERSE_LIBRARY that is wrong is an error naming it.
    env = dict(os.environ, TERSE_LIBRARY="/nonexistent/libterse.so",
               PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", "import terse; terse.version()"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode != 0 and "/nonexistent/libterse.so (no such file)" in r.stdout \
        and "TERSE_LIBRARY" in r.stdout, r.stdout
    checks.append("a wrong TERSE_LIBRARY fails naming the path")

    # Every codec, every bucket dtype, both GradBucket APIs, with and without overlap: a future
    # holding the reduced bucket, in place (completed at return without overlap); both modes
    # give the same bits and residuals.
    for codec in CODECS + LOWBIT + AUTOS:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            outcome = {}
            for overlap in (False, True):
                state = TerseState(codec, overlap=overlap)
                g = torch.Generator().manual_seed(3)
                w = torch.nn.Parameter(torch.zeros(300, 10, dtype=dtype))
                t = torch.randn(3000, generator=g).to(dtype)
                x = t.clone()
                futs = [terse_hook(state, b) for b in (FakeBucket(t, 0, [w]), OldBucket(t, 1))]
                for fut in futs:
                    assert overlap or fut.done(), "overlap=False must return a completed future"
                    assert fut.wait() is t and fut.value() is t
                if codec == "none":
                    assert torch.equal(t, x), "none at a world of one must be exact"
                elif codec in ("fp16", "bf16") and str(dtype).endswith(
                        codec.replace("fp", "float")):
                    assert torch.equal(t, x), f"{codec} of {dtype} values must be exact"
                assert torch.isfinite(t.float()).all()
                fbs = [state.feedback(i) for i in (0, 1)]
                outcome[overlap] = (t, [f.to_bytes() if f is not None else None for f in fbs])
            assert torch.equal(outcome[False][0], outcome[True][0]) and \
                outcome[False][1] == outcome[True][1], f"{codec} {dtype}: overlap changes results"
    checks.append("11 codecs and 2 auto budgets x float32/float16/bfloat16 x new/old GradBucket x "
                  "overlap on/off: "
                  "futures of the in-place result, the same bits and residuals either way")

    # Overlap: buckets queue on the communicator's thread in hook order; the communicator's
    # blocking calls wait behind them; a failed queued call is its future's error.
    state = TerseState("onebit")
    assert state.overlap, "overlap is the default"
    g = torch.Generator().manual_seed(5)
    ts = [torch.randn(70000 + 1000 * i, generator=g) for i in range(4)]
    ref = [t.clone() for t in ts]
    futs = [terse_hook(state, FakeBucket(t, i, [])) for i, t in enumerate(ts)]
    ref_fbs = [terse.Feedback("onebit:block=2048", t.numel()) for t in ref]
    for t, fb in zip(ref, ref_fbs):
        state.comm.allreduce(t, state.spec, "avg", fb)   # queued behind the four buckets
    assert all(f.done() for f in futs), "a blocking call overtook queued reductions"
    for i, (t, r) in enumerate(zip(ts, ref)):
        assert torch.equal(t, r) and state.feedback(i).to_bytes() == ref_fbs[i].to_bytes()
    bad = state.comm.allreduce_async(torch.zeros(10), "onebit", "avg",
                                     terse.Feedback("onebit", 20))
    expect_raises(terse.TerseError, bad.result, "20")
    state.comm.wait()
    checks.append("overlap: queued buckets run in order, blocking calls wait behind them, a "
                  "failed queued call is its future's TerseError")

    # Bad input: clear errors.
    state = TerseState("onebit")
    expect_raises(TypeError, lambda: terse_hook(state, FakeBucket(torch.zeros(4).double(), 0, [])),
                  "float64", "float32, float16 and bfloat16")
    expect_raises(TypeError, lambda: terse_hook({"codec": "onebit"}, FakeBucket(
        torch.zeros(4), 0, [])), "TerseState")
    expect_raises(terse.TerseError, lambda: TerseState("topk:ratio=2"), "ratio")
    expect_raises(terse.TerseError, lambda: TerseState("zip"), "unknown codec 'zip'",
                  "onebit[:block=N]")
    checks.append("float64 buckets, a wrong state and bad specs give clear errors")

    # Layout tracking: same index, same parameters -> same residuals; other parameters or another
    # size -> new residuals.
    state = TerseState("topk:ratio=0.1")
    a, b = torch.nn.Parameter(torch.zeros(100)), torch.nn.Parameter(torch.zeros(100))
    c = torch.nn.Parameter(torch.zeros(50))
    t = torch.randn(200)
    terse_hook(state, FakeBucket(t.clone(), 0, [a, b]))
    fb = state.feedback(0)
    terse_hook(state, FakeBucket(t.clone(), 0, [a, b]))
    assert state.feedback(0) is fb and state.created == 1
    terse_hook(state, FakeBucket(t.clone(), 0, [b, a]))  # DDP reordered the bucket
    assert state.feedback(0) is not fb and state.created == 2
    terse_hook(state, FakeBucket(torch.randn(150), 0, [a, c]))
    assert state.created == 3 and state.feedback(0).count == 150
    checks.append("error feedback follows the bucket layout (reorder or resize -> new state)")

    # Checkpoints: round trip, pending until the layout matches, errors.
    state = TerseState("onebit")
    for i in range(3):
        terse_hook(state, FakeBucket(torch.randn(200), 0, [a, b]))
        terse_hook(state, FakeBucket(torch.randn(150), 1, [a, c]))
    sd = state.state_dict()
    path = os.path.join(args.work, "unit.pt")
    os.makedirs(args.work, exist_ok=True)
    torch.save(sd, path)
    try:
        sd2 = torch.load(path, weights_only=True)
    except TypeError:
        sd2 = torch.load(path)
    fresh = TerseState("onebit")
    fresh.load_state_dict(sd2)
    for i in (0, 1):
        assert torch.equal(fresh.state_dict()["buckets"][i]["feedback"], sd["buckets"][i]["feedback"])
    # First call with another layout: kept aside; then the saved layout: taken up.
    terse_hook(fresh, FakeBucket(torch.randn(350), 0, [a, b, c]))
    assert fresh.claimed == 0 and 0 in fresh._pending
    out1 = torch.randn(200)
    ref = out1.clone()
    copy_fb = terse.Feedback.from_bytes(sd["buckets"][0]["feedback"].numpy().tobytes())
    fresh.comm.allreduce(ref, fresh.spec, "avg", copy_fb)
    terse_hook(fresh, FakeBucket(out1, 0, [a, b])).wait()
    assert fresh.claimed == 1 and torch.equal(out1, ref), "the loaded residuals were not applied"
    # Bucket 1's saved layout never comes: after two mismatches it is dropped with a warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        terse_hook(fresh, FakeBucket(torch.randn(100), 1, [a]))
        assert not caught
        terse_hook(fresh, FakeBucket(torch.randn(100), 1, [a]))
    assert any("another bucket layout" in str(w.message) for w in caught) and not fresh._pending
    checks.append("state_dict round trip (torch.save/torch.load weights_only), loaded residuals "
                  "applied when the layout matches, dropped with a warning when it never does")

    expect_raises(ValueError, lambda: TerseState("topk").load_state_dict(sd),
                  "'onebit:block=2048'", "'topk:ratio=0.01'")
    expect_raises(ValueError, lambda: TerseState("onebit").load_state_dict({"a": 1}), "format")
    other_rank = dict(sd, rank=1)
    expect_raises(ValueError, lambda: TerseState("onebit").load_state_dict(other_rank),
                  "rank 1", "strict=False")
    TerseState("onebit").load_state_dict(other_rank, strict=False)
    damaged = copy.deepcopy(sd)
    damaged["buckets"][0]["feedback"][60] ^= 1
    expect_raises(terse.TerseError, lambda: TerseState("onebit").load_state_dict(damaged),
                  "corrupt")
    wrong_count = copy.deepcopy(sd)
    wrong_count["buckets"][0]["count"] = 7
    expect_raises(ValueError, lambda: TerseState("onebit").load_state_dict(wrong_count),
                  "7-element")
    checks.append("checkpoints of another codec, format, rank, damaged or mis-sized: clear errors")

    # CUDA buckets are staged through host memory.
    if torch.cuda.is_available():
        state = TerseState("int8")
        t = torch.randn(5000, device="cuda")
        x = t.clone()
        host = x.cpu()
        state.comm.allreduce(host, "int8", "avg")
        fut = terse_hook(state, FakeBucket(t, 0, []))
        torch.cuda.synchronize()
        assert fut.value() is t and torch.equal(t.cpu(), host)
        checks.append("CUDA bucket staged through host memory")
    else:
        print("SKIP (part): CUDA buckets: torch.cuda.is_available() is False here")

    # Last, as it ends the communicator: after an abort, backward() of a DDP model (a gloo world
    # of one) raises terse's message, with and without overlap.
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port_pair()}", rank=0,
                            world_size=1)
    models = {}
    for overlap in (True, False):
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 10))
        models[overlap] = (ddp, terse.ddp.register(ddp, "int8", overlap=overlap))
        ddp(torch.randn(4, 10)).sum().backward()
    models[True][1].comm.abort("unit test aborts")
    for overlap, (ddp, state) in models.items():
        fut = terse_hook(state, FakeBucket(torch.randn(100), 0, [])) if overlap else None
        if fut is not None:
            expect_raises(RuntimeError, fut.wait, "TerseError", "unit test aborts")
        expect_raises(RuntimeError, lambda: ddp(torch.randn(4, 10)).sum().backward(),
                      "TerseError", "unit test aborts")
    terse.ddp.shutdown()
    checks.append("after abort() backward() raises terse's error, with and without overlap")

    for c in checks:
        print("ok:", c)
    print("PASS")


# ---------------------------------------------------------------------------------------------
# pip: the package installs from the checkout and finds the library

def pip(args):
    import importlib.util
    if importlib.util.find_spec("pip") is None:
        print(f"SKIP: pip is not installed for {sys.executable} (python3-pip)")
        sys.exit(SKIP)
    if importlib.util.find_spec("scikit_build_core") is None:
        print(f"SKIP: scikit-build-core (python/pyproject.toml's build backend) is not installed "
              f"for {sys.executable}; scripts/torch-env.sh installs it")
        sys.exit(SKIP)
    lib = os.path.abspath(args.library)
    assert os.path.exists(lib), f"{lib} is missing (build the terse_c target)"
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    src, target = os.path.join(work, "src"), os.path.join(work, "site")
    # A copy: setuptools writes build/ and *.egg-info next to the sources it builds.
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation",
           "--no-deps", "--no-index", "--root-user-action=ignore", "--target", target, src]
    print("+", " ".join(cmd), flush=True)
    # The copy has no CMake project above it: package the library built already.
    subprocess.run(cmd, check=True, env=dict(os.environ, TERSE_PREBUILT_LIBRARY=lib))
    # The package's own copy is found first (Torch.PipPackage checks that); without it the
    # package must still find a library through TERSE_LIBRARY and the dynamic loader.
    os.remove(os.path.join(target, "terse", "libterse.so"))
    probe = ("import terse, sys; assert terse.__file__.startswith(sys.argv[1]), terse.__file__; "
             "c = terse.Communicator(); print(terse.version(), terse.library_path(), c)")
    base = {k: v for k, v in os.environ.items()
            if k not in ("TERSE_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    for how, extra in (("TERSE_LIBRARY", {"TERSE_LIBRARY": lib}),
                       ("the dynamic loader", {"LD_LIBRARY_PATH": os.path.dirname(lib)})):
        env = dict(base, PYTHONPATH=target, **extra)
        out = subprocess.run([sys.executable, "-c", probe, target], env=env, cwd=work,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert out.returncode == 0, f"installed package through {how}:\n{out.stdout}"
        print(f"ok: installed package loads libterse.so through {how}: {out.stdout.strip()}")
    print("PASS")


# ---------------------------------------------------------------------------------------------
# example: examples/pytorch/ddp_hooks.py compare on a tiny model

def example(args):
    import json
    out = os.path.abspath(args.work)
    shutil.rmtree(out, ignore_errors=True)
    hooks = "ddp powersgd terse:onebit terse-sync:onebit"
    cmd = [sys.executable, os.path.join(ROOT, "examples", "pytorch", "ddp_hooks.py"), "compare",
           "--nproc", "2", "--steps", "14", "--warmup", "12", "--hidden", "64", "--depth", "2",
           "--hooks", hooks, "--out", out, "--timeout", "200", "--port", "0"]
    print("+", " ".join(cmd), flush=True)
    run = subprocess.run(cmd, timeout=args.timeout, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    print(run.stdout, flush=True)
    assert run.returncode == 0, f"ddp_hooks.py compare exited {run.returncode}"
    # --port 0: each run got a free port of its own, not torchrun's port 0 or a fixed range.
    ports = [int(x.split()[0]) for x in run.stdout.split("--master_port ")[1:]]
    assert len(ports) == len(hooks.split()) and 0 not in ports, ports
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)["results"]
    assert [r["hook"] for r in results] == hooks.split()
    for r in results:
        assert r["steps_per_s"] > 0 and math.isfinite(r["held_out_loss"]), r
        assert r["held_out_loss"] < r["first_loss"] * 1.5, r
    overlapped, blocking = results[2], results[3]
    for key in ("train_loss_last10", "held_out_loss"):
        assert overlapped[key] == blocking[key], f"{key}: overlap changed training: {results}"
    print("PASS")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["ddp", "ddp-worker", "multinode", "multinode-worker",
                                    "peer-death", "peer-death-worker", "unit", "pip", "example"])
    p.add_argument("--nodes", type=int, default=2, help="multinode: emulated nodes")
    p.add_argument("--per-node", type=int, default=2, help="multinode: ranks per node")
    p.add_argument("--overlap", choices=["on", "off"], default="on",
                   help="peer-death: the hook's overlap setting")
    p.add_argument("--codec", default="int8", help="peer-death: the hook's codec")
    p.add_argument("--work", default="ddp_hook_test.work")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--timeout", type=int, default=240)
    p.add_argument("--library", help="pip mode: the built libterse.so")
    args = p.parse_args()
    if args.mode != "pip":
        require_torch()
    if args.mode not in ("ddp-worker", "multinode-worker", "peer-death-worker", "pip"):
        sys.path.insert(0, os.path.join(ROOT, "python"))
    {"ddp": ddp_driver, "ddp-worker": ddp_worker, "multinode": multinode_driver,
     "multinode-worker": multinode_worker, "peer-death": peer_death_driver,
     "peer-death-worker": peer_death_worker, "unit": unit, "pip": pip,
     "example": example}[args.mode](args)


if __name__ == "__main__":
    main()
