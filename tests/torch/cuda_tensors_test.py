#!/usr/bin/env python3
"""terse's Python layer on CUDA tensors (python/terse/ddp.py, python/terse/optim.py), and
OneBitAdam's agreement on its parameters at construction.

  dispatch: one process. terse.ddp.cuda_path, which decides how a tensor is reduced: "host" for
        CPU tensors; "device" (terse's CUDA path, codecs on the GPU) only for a cuda:0 tensor and
        a libterse.so built with CUDA that sees a device; "staged" (host copies) with the reason
        otherwise; "unsupported" for other devices. The loaded library's terse_cuda_info agrees
        with the build's TERSE_HAVE_CUDA (--cuda-built). OneBitAdam refuses parameters it cannot
        take (CUDA without a CUDA build or device, several devices, other dtypes) with a clear
        ValueError, before any C call; CUDA tensors are faked by a Tensor subclass, so this runs
        with CPU-only torch.
  order: two processes (a file store), OneBitAdam built with
        1. the same shapes in another order on rank 1 ((8,8),(64,) against (64,),(8,8)):
           ValueError on both ranks naming rank 1 (before: no error, and gradients +1 and -1
           averaged to 0 moved nothing; issue #35);
        2. the same order: builds, and a step moves the parameters identically on both ranks;
        3. a float64 parameter on rank 1 only: rank 1 its own ValueError, rank 0 terse's error
           naming rank 1 within seconds (not after TERSE_TIMEOUT_MS);
        4. another codec on rank 1: ValueError on both ranks about the options.
  gpu:  two processes on one GPU (gloo for the exact reference, terse over a file store and
        loopback): the DDP hook on a CUDA model with every codec, each bucket bitwise equal to
        terse's host path on a CPU copy of the same input and state (onebit too: its GPU scales
        are summed in the CPU's order, docs/cuda.md), the casting codecs within their documented bound of
        the exact average, parameters identical on both ranks; then OneBitAdam on CUDA
        parameters (none and onebit) against the same optimizer on CPU parameters, fed the same
        gradients. SKIP (77) without a CUDA device or a CUDA build of libterse.so; this is
        scripts/device-check.sh's stage 3.

Exit status 77 (ctest SKIP_RETURN_CODE) when torch cannot be imported.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import _testlib
from _testlib import HERE, ROOT, SKIP, expect_raises


def require_torch():
    _testlib.require_torch(terse_python=True)


# ---------------------------------------------------------------------------------------------
# dispatch

def dispatch(args):
    require_torch()
    import torch
    import terse
    import terse.optim
    from terse import _lib
    from terse.ddp import cuda_path
    for v in ("TERSE_RANK", "TERSE_WORLD_SIZE", "RANK", "WORLD_SIZE", "TERSE_STORE"):
        os.environ.pop(v, None)

    cpu, cuda0, cuda1 = torch.device("cpu"), torch.device("cuda", 0), torch.device("cuda", 1)
    assert cuda_path(cpu) == ("host", "")
    for info in (None, (False, False), (True, True)):
        assert cuda_path(cpu, info) == ("host", ""), info
    path, why = cuda_path(torch.device("meta"), (True, True))
    assert path == "unsupported" and "meta" in why, (path, why)
    cases = [(None, cuda0, "staged", "predates terse_cuda_info"),
             ((False, False), cuda0, "staged", "built without CUDA"),
             ((True, False), cuda0, "staged", "no usable CUDA device"),
             ((True, True), cuda1, "staged", "CUDA_VISIBLE_DEVICES"),
             ((True, True), cuda0, "device", "")]
    for info, device, want, words in cases:
        path, why = cuda_path(device, info)
        assert path == want and words in why, (info, device, path, why)
    print("ok: cuda_path: host for CPU; device only for cuda:0 with a usable CUDA build; staged "
          "with the reason otherwise")

    built, usable = _lib.cuda_info()
    want = args.cuda_built == "1"
    assert built == want, f"terse_cuda_info says built={built}, the build says {want}"
    assert usable == (built and torch.cuda.is_available()), (built, usable)
    print(f"ok: terse_cuda_info of {_lib.library_path()}: built={built} usable={usable}")

    class FakeCuda(torch.Tensor):
        """A CPU tensor that says it is on cuda:0 (CPU-only torch cannot make CUDA tensors)."""

        @property
        def device(self):
            return cuda0

    def fake(n):
        return torch.zeros(n).as_subclass(FakeCuda).requires_grad_()

    p = fake(10)
    assert p.device == cuda0 and isinstance(p, torch.Tensor) and p.is_leaf
    real = _lib.cuda_info

    def opt(params):
        return terse.optim.OneBitAdam(params, codec="none", warmup_steps=2)
    try:
        _lib.cuda_info = lambda: (False, False)
        expect_raises(ValueError, lambda: opt([fake(10)]), "cuda:0", "built without CUDA")
        _lib.cuda_info = lambda: (True, False)
        expect_raises(ValueError, lambda: opt([fake(10)]), "no usable CUDA device")
        _lib.cuda_info = lambda: None
        expect_raises(ValueError, lambda: opt([fake(10)]), "predates terse_cuda_info")
        _lib.cuda_info = lambda: (True, True)
        expect_raises(ValueError, lambda: opt([fake(10), torch.nn.Parameter(torch.zeros(3))]),
                      "cuda:0", "cpu", "one device")

        class Probe:   # _check_params on its own: the device the flat buffers would go to
            _index = [0, 1]
            _params = [fake(4), fake(5)]
        assert terse.optim.OneBitAdam._check_params(Probe()) == cuda0
    finally:
        _lib.cuda_info = real

    # The hook's device path with the C call and torch's streams recorded instead of run: the
    # bucket's own pointer goes to terse_allreduce (in place, avg, the codec), after the legacy
    # stream was made to wait for the current one when they differ; nothing is staged.
    import terse.ddp
    from terse.ddp import TerseState, terse_hook

    class Bucket:
        def __init__(self, t):
            self.t = t

        def buffer(self):
            return self.t

        def index(self):
            return 0

        def parameters(self):
            return []

    class Stream:
        def __init__(self, name):
            self.name, self.waited = name, []

        def wait_stream(self, other):
            self.waited.append(other.name)

    calls = []

    class FakeLib:
        def terse_allreduce(self, comm, send, recv, count, dtype, op, codec, fb):
            calls.append((send.value, recv.value, count, dtype, op, codec, fb))
            return 0
    state = TerseState("int8", overlap=False)
    legacy, side = Stream("legacy"), Stream("side")
    saved = (_lib.cuda_info, _lib.lib, torch.cuda.current_stream, torch.cuda.default_stream)
    try:
        _lib.cuda_info = lambda: (True, True)
        _lib.lib = lambda: FakeLib()
        torch.cuda.default_stream = lambda device=None: legacy
        for current, waits in ((legacy, []), (side, ["side"])):
            torch.cuda.current_stream = lambda device=None, s=current: s
            legacy.waited.clear()
            calls.clear()
            t = torch.randn(300).as_subclass(FakeCuda)
            before = t.clone()
            try:
                terse_hook(state, Bucket(t))
            except RuntimeError as e:   # torch.futures.Future(devices=[cuda:0]), CPU torch
                assert "cuda" in str(e), e
            want = (t.data_ptr(), t.data_ptr(), 300, _lib.FLOAT32, _lib.AVG, state.spec.encode(),
                    None)
            assert calls == [want], calls
            assert legacy.waited == waits, (current.name, legacy.waited)
            assert torch.equal(torch.Tensor(t), torch.Tensor(before)) and state.staged_why == ""
    finally:
        _lib.cuda_info, _lib.lib, torch.cuda.current_stream, torch.cuda.default_stream = saved
    # And the staged path when the library cannot take the pointer: the reason is kept.
    _lib.cuda_info = lambda: (False, False)
    try:
        t = torch.randn(300).as_subclass(FakeCuda)
        try:
            terse_hook(state, Bucket(t))
        except RuntimeError as e:
            assert "cuda" in str(e), e
        assert "built without CUDA" in state.staged_why, state.staged_why
    finally:
        _lib.cuda_info = saved[0]
    print("ok: the hook hands a cuda:0 bucket's own pointer to terse_allreduce after the legacy "
          "stream waited for torch's current one; a library without CUDA stages it and says why")

    if not real()[1]:
        # The real library: a CUDA build without a device, or a CPU build.
        expect_raises(ValueError, lambda: opt([fake(10)]), "cuda:0")
    expect_raises(ValueError, lambda: opt([torch.nn.Parameter(torch.zeros(3).double())]),
                  "float64", "float32")
    a = torch.nn.Parameter(torch.ones(5))
    o = opt([a])
    assert o.device == cpu
    a.grad = torch.ones(5)
    o.step()
    assert (a < 1).all(), a
    print("ok: OneBitAdam refuses CUDA parameters without a CUDA build or device, mixed devices "
          "and float64 with a clear ValueError; CPU parameters as before")


# ---------------------------------------------------------------------------------------------
# order: two ranks

def order(args):
    require_torch()
    work = args.work or tempfile.mkdtemp(prefix="terse-order-")
    os.makedirs(work, exist_ok=True)
    store = tempfile.mkdtemp(prefix="store-", dir=work)
    envs = []
    for rank in range(2):
        env = dict(os.environ, TERSE_RANK=str(rank), TERSE_WORLD_SIZE="2", TERSE_STORE=store,
                   UCX_NET_DEVICES="lo", TERSE_CPU_THREADS="1", TERSE_TIMEOUT_MS="30000",
                   PYTHONPATH=_testlib.python_path())
        for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(v, None)
        envs.append(env)
    results = []
    for p, out in _testlib.run_workers(__file__, "order", work, envs, args.timeout):
        if p.returncode != 0 or not os.path.exists(out):
            sys.exit(f"FAIL: a rank exited with {p.returncode}")
        with open(out) as f:
            results.append(json.load(f))
    failed = [f"rank {r}: {m}" for r, res in enumerate(results) for m in res["failures"]]
    for r, res in enumerate(results):
        for line in res["log"]:
            print(f"rank {r}: {line}")
    if failed:
        sys.exit("FAIL:\n  " + "\n  ".join(failed))
    print("ok: parameter order, refusals and options agreed at construction on both ranks")


def order_worker(args):
    require_torch()
    import torch
    import terse.optim
    from terse import TerseError
    rank = int(os.environ["TERSE_RANK"])
    failures, log = [], []

    def attempt(name, build, kind, words):
        start = time.monotonic()
        try:
            build()
        except Exception as e:  # noqa: BLE001 -- which kind it was is the check
            text = f"{type(e).__name__}: {e}"
            log.append(f"{name}: {text[:300]} ({time.monotonic() - start:.2f} s)")
            if not isinstance(e, kind) or any(w not in text for w in words):
                failures.append(f"{name}: expected {kind.__name__} with {words}, got {text}")
            elif time.monotonic() - start > 10:
                failures.append(f"{name}: the error took {time.monotonic() - start:.1f} s")
            return
        failures.append(f"{name}: no error (expected {kind.__name__} with {words})")

    def params(order):
        a = torch.nn.Parameter(torch.zeros(8, 8))
        b = torch.nn.Parameter(torch.zeros(64))
        return [a, b] if order == 0 else [b, a]

    # Outside the timed attempts, which are about how fast a refusal reaches the other rank: the
    # process's communicator (a rendezvous that lasts until the other rank arrives) and torch's
    # first optimizer, whose construction imports torch's compiler stack (9.3 s on this 2-core
    # VM at load 20, 2026-11-29; `torch.optim.SGD(...)` timed in a fresh interpreter).
    import terse.ddp
    terse.ddp.default_communicator()
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

    # 1. The same shapes in another order on rank 1. Gradient +1 on rank 0, -1 on rank 1: before
    #    the agreement the "average" was 0 and nothing moved, without an error.
    def mismatched():
        ps = params(rank)
        opt = terse.optim.OneBitAdam(ps, lr=0.1, codec="none", warmup_steps=2)
        for p in ps:
            p.grad = torch.full_like(p, 1.0 if rank == 0 else -1.0)
        opt.step()
        log.append(f"mismatched order built and stepped: max |p| = "
                   f"{max(p.abs().max().item() for p in ps)}")
    attempt("another order on rank 1", mismatched, ValueError,
            ["differ between ranks", "rank(s) 1", "same order", "(8, 8)", "(64,)"])

    # 2. The same order: builds, steps, and the ranks agree (the communicator still works).
    ps = params(0)
    opt = terse.optim.OneBitAdam(ps, lr=0.1, codec="none", warmup_steps=2)
    for p in ps:
        p.grad = torch.full_like(p, 1.0 + rank)
    opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in ps])
    both = torch.zeros(2 * flat.numel())
    both[rank * flat.numel():(rank + 1) * flat.numel()] = flat
    opt.communicator.allreduce(both, "none", "sum")
    if not (flat.abs().min() > 0 and torch.equal(both[:flat.numel()], both[flat.numel():])):
        failures.append("the same order: parameters did not move identically on both ranks")
    log.append(f"same order: built, one step moved every parameter by {flat.abs().min():.3g}")

    # 3. A rank refuses its own parameters: the other fails at once, naming it.
    def refused():
        ps = params(0)
        if rank == 1:
            ps[1] = torch.nn.Parameter(torch.zeros(64, dtype=torch.float64))
        terse.optim.OneBitAdam(ps, codec="none")
    if rank == 1:
        attempt("float64 on rank 1", refused, ValueError, ["float64", "float32"])
    else:
        attempt("float64 on rank 1", refused, TerseError, ["rank 1 rejected"])

    # 4. Another codec on rank 1.
    attempt("another codec on rank 1",
            lambda: terse.optim.OneBitAdam(params(0), codec="onebit" if rank else "int8"),
            ValueError, ["options differ", "rank(s) 1"])

    # The communicator still works after all that.
    t = torch.full((3,), float(rank))
    opt.communicator.allreduce(t, "none", "sum")
    if t.tolist() != [1.0, 1.0, 1.0]:
        failures.append(f"allreduce after the checks gave {t.tolist()}")
    with open(args.work, "w") as f:
        json.dump({"failures": failures, "log": log}, f)


# ---------------------------------------------------------------------------------------------
# gpu: two ranks on one GPU

GPU_CODECS = ["none", "fp16", "bf16", "int8", "fp8", "mxfp8", "mxfp4", "int4", "onebit", "topk"]
BOUNDED = ("none", "fp16", "bf16", "int8")   # ddp_hook_test.Checker.bound_of knows these


def gpu(args):
    require_torch()
    import torch
    from terse import _lib
    if not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        sys.exit(SKIP)
    info = _lib.cuda_info()
    if not info or not all(info):
        print(f"SKIP: {_lib.library_path()} cannot take CUDA tensors (terse_cuda_info: {info})")
        sys.exit(SKIP)
    sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
    from ddp_hooks import free_port_pair
    work = args.work or tempfile.mkdtemp(prefix="terse-gpu-")
    os.makedirs(work, exist_ok=True)
    store = tempfile.mkdtemp(prefix="store-", dir=work)
    port = free_port_pair()
    envs = [dict(os.environ, TERSE_RANK=str(rank), TERSE_WORLD_SIZE="2", TERSE_STORE=store,
                 RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 UCX_NET_DEVICES="lo", CUDA_VISIBLE_DEVICES="0", PYTHONPATH=_testlib.python_path())
            for rank in range(2)]
    results = []
    for p, out in _testlib.run_workers(__file__, "gpu", work, envs, args.timeout):
        if not os.path.exists(out):
            sys.exit(f"FAIL: a rank exited with {p.returncode} and wrote no results")
        with open(out) as f:
            results.append(json.load(f))
    for line in results[0]["log"]:
        print(line)
    failed = [f"rank {r}: {m}" for r, res in enumerate(results) for m in res["failures"]]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": results[0]["rows"], "failures": failed}, f, indent=1)
    if failed or any(p.returncode for p, _ in procs):
        sys.exit("FAIL:\n  " + "\n  ".join(failed or ["a rank failed"]))
    print("ok: the DDP hook and OneBitAdam on CUDA tensors, 2 ranks on one GPU")


def gpu_worker(args):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, HERE)
    import terse
    import terse.optim
    from terse.ddp import TerseState, terse_hook, _bucket_tensor, _bucket_index, cuda_path
    from ddp_hook_test import Checker
    rank = int(os.environ["TERSE_RANK"])
    dist.init_process_group("gloo")
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    failures, log, rows = [], [], []

    def exact_average(x):
        xs = [torch.zeros(x.numel(), dtype=torch.float64) for _ in range(2)]
        dist.all_gather(xs, x.double())
        return xs, sum(xs) / 2

    for codec in GPU_CODECS:
        state = TerseState(codec)
        worst = {"bound": 0.0, "host": 0.0, "buckets": 0}

        def hook(st, bucket, codec=codec, worst=worst):
            tensor = _bucket_tensor(bucket)
            index = _bucket_index(bucket)
            assert cuda_path(tensor.device)[0] == "device", cuda_path(tensor.device)
            x = tensor.detach().cpu()
            fb = st._feedback_for(index, bucket, tensor) if st.error_feedback else None
            before = fb.to_bytes() if fb is not None else None
            fut = terse_hook(st, bucket)
            out = fut.wait()
            got = out.detach().cpu().double()
            copy_fb = terse.Feedback.from_bytes(before) if before is not None else None
            host = st.comm.allreduce(x.clone(), st.spec, "avg", copy_fb).double()
            scale = host.abs().max().item() or 1.0
            diff = (got - host).abs().max().item() / scale if x.numel() else 0.0
            worst["host"] = max(worst["host"], diff)
            allowed_host = 0.0  # every codec, onebit included, since 2026-11-28
            if diff > allowed_host:
                failures.append(f"{codec} bucket {index}: the device path differs from the host "
                                f"path by {diff:.3g} of the largest value (allowed "
                                f"{allowed_host})")
            xs, exact = exact_average(x)
            if codec in BOUNDED and x.numel():
                ratio = ((got - exact).abs() / Checker.bound_of(codec, 2, xs, exact)).max().item()
                worst["bound"] = max(worst["bound"], ratio)
                if ratio > 1.0:
                    failures.append(f"{codec} bucket {index}: error {ratio:.3f} times the bound")
            worst["buckets"] += 1
            return fut

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.Tanh(),
                                    torch.nn.Linear(512, 512), torch.nn.Tanh(),
                                    torch.nn.Linear(512, 8)).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0],
                                                        bucket_cap_mb=1)
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(10 + rank)
        losses = []
        for _ in range(4):
            x = torch.randn(32, 64, generator=gen).to(dev)
            y = torch.randn(32, 8, generator=gen).to(dev)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        flat = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
        both = [torch.zeros_like(flat) for _ in range(2)]
        dist.all_gather(both, flat)
        if not torch.equal(both[0], both[1]):
            failures.append(f"{codec}: parameters differ between the ranks")
        if not all(map(lambda v: v == v and abs(v) < 1e30, losses)):
            failures.append(f"{codec}: losses {losses}")
        row = {"codec": codec, "buckets": worst["buckets"], "device_vs_host": worst["host"],
               "err_over_bound": worst["bound"] if codec in BOUNDED else None,
               "staged": state.staged_why}
        rows.append(row)
        log.append(f"hook {codec:<7} buckets {worst['buckets']:>3}  device vs host "
                   f"{worst['host']:.2e}  err/bound "
                   + (f"{worst['bound']:.3f}" if codec in BOUNDED else "  -  "))

    # OneBitAdam: the same gradients on CUDA and on CPU parameters.
    for codec in ("none", "onebit"):
        shapes = [(256, 64), (256,), (8, 256)]
        gen = torch.Generator().manual_seed(5)
        init = [torch.randn(s, generator=gen) for s in shapes]
        cuda_p = [torch.nn.Parameter(t.clone().to(dev)) for t in init]
        cpu_p = [torch.nn.Parameter(t.clone()) for t in init]
        oc = terse.optim.OneBitAdam(cuda_p, lr=1e-2, codec=codec, warmup_steps=3)
        oh = terse.optim.OneBitAdam(cpu_p, lr=1e-2, codec=codec, warmup_steps=3)
        assert oc.device.type == "cuda" and oh.device.type == "cpu"
        ggen = torch.Generator().manual_seed(100 + rank)
        for _ in range(8):
            grads = [torch.randn(s, generator=ggen) for s in shapes]
            for p, g in zip(cuda_p, grads):
                p.grad = g.to(dev)
            for p, g in zip(cpu_p, grads):
                p.grad = g.clone()
            oc.step()
            oh.step()
        a = torch.cat([p.detach().reshape(-1).cpu() for p in cuda_p])
        b = torch.cat([p.detach().reshape(-1) for p in cpu_p])
        moved = (b - torch.cat([t.reshape(-1) for t in init])).abs().max().item()
        diff = (a - b).abs().max().item()
        both = [torch.zeros_like(a) for _ in range(2)]
        dist.all_gather(both, a)
        if not oc.frozen or oc.steps != 8:
            failures.append(f"OneBitAdam {codec}: {oc.steps} steps, frozen={oc.frozen}")
        if not torch.equal(both[0], both[1]):
            failures.append(f"OneBitAdam {codec}: CUDA parameters differ between the ranks")
        # Bitwise: the kernels share adam_math.h and the codecs' arithmetic with the CPU (the
        # first GPU check, 2026-11-28, measured 0 for none and onebit).
        if diff != 0.0 or moved == 0:
            failures.append(f"OneBitAdam {codec}: CUDA and CPU parameters differ by {diff:.3g} "
                            f"(they moved {moved:.3g})")
        rows.append({"codec": f"OneBitAdam {codec}", "cuda_vs_cpu": diff, "moved": moved})
        log.append(f"OneBitAdam {codec:<7} 8 steps (3 warm-up): CUDA vs CPU parameters "
                   f"{diff:.2e} (moved {moved:.3g})")
    terse.ddp.shutdown()
    with open(args.work, "w") as f:
        json.dump({"failures": failures, "log": log, "rows": rows}, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["dispatch", "order", "order-worker", "gpu", "gpu-worker"])
    p.add_argument("--work", default="")
    p.add_argument("--json", default="", help="gpu: write the rows and failures here")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--cuda-built", choices=["0", "1"], default="0",
                   help="dispatch: whether libterse.so was configured with CUDA")
    args = p.parse_args()
    {"dispatch": dispatch, "order": order, "order-worker": order_worker, "gpu": gpu,
     "gpu-worker": gpu_worker}[args.mode](args)


if __name__ == "__main__":
    main()
