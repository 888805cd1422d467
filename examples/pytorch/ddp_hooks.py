#!/usr/bin/env python3
"""Trains one small model with DistributedDataParallel under several gradient communication
hooks and reports time per step and final loss side by side (docs/pytorch.md).

  compare: runs `torchrun --nproc_per_node N ddp_hooks.py worker --hook H` for every hook and
           prints (and with --out writes) a Markdown table and the raw JSON.
  overhead: times one tiny allreduce through raw ctypes, through terse.Communicator and through
           terse_hook (a world of one), i.e. what the Python layer costs per bucket.
  worker:  one run under torchrun (gloo process group):
             --hook ddp          DDP's own allreduce (gloo), no hook
             --hook fp16         PyTorch's fp16_compress_hook (gloo)
             --hook powersgd     PyTorch's powerSGD_hook (gloo), --psgd-rank, starts after 10 steps
             --hook terse:SPEC   terse's hook with codec SPEC (none, fp16, bf16, int8, onebit,
                                 topk:ratio=0.01, ...), overlapping buckets with backward
             --hook terse-sync:SPEC  the same with overlap=False: each bucket is reduced inside
                                 the hook, backward waits for it

The model is an MLP on a synthetic 10-class problem whose labels come from a fixed random teacher
network, so there is nothing to download and every run sees the same data: rank r of n takes
the r-th slice of the global batch of step s. The final loss is measured on 4096 held-out rows.

With --netns PREFIX (as root, namespaces PREFIX-h1..PREFIX-hN made by
scripts/bench-network.sh --probe-only --keep; see ddp_hooks_network.sh) each rank runs in its
own namespace as a one-process torchrun "node", so all traffic crosses the shaped links.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_HOOKS = ["ddp", "fp16", "powersgd", "terse:none", "terse:fp16", "terse:bf16",
                 "terse:int8", "terse:onebit", "terse:topk:ratio=0.01"]


# ---------------------------------------------------------------------------------------------
# worker

def build(args):
    import torch
    import torch.nn as nn
    torch.manual_seed(args.seed)
    layers, width = [], args.features
    for _ in range(args.depth):
        layers += [nn.Linear(width, args.hidden), nn.ReLU()]
        width = args.hidden
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def data(args, step, rank, world):
    """Rows [rank*b, (rank+1)*b) of step `step`'s global batch (b = per-rank batch)."""
    import torch
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    x = torch.randn(args.batch * world, args.features, generator=g)
    x = x[rank * args.batch:(rank + 1) * args.batch]
    return x, label(args, x)


_teacher = None


def label(args, x):
    import torch
    global _teacher
    if _teacher is None:
        g = torch.Generator().manual_seed(12345)
        _teacher = (torch.randn(args.features, 64, generator=g) / args.features ** 0.5,
                    torch.randn(64, 10, generator=g) / 8)
    w1, w2 = _teacher
    return (torch.tanh(x @ w1) @ w2).argmax(dim=1)


def held_out_loss(args, model, rank, world):
    import torch
    import torch.distributed as dist
    g = torch.Generator().manual_seed(999)
    x = torch.randn(4096, args.features, generator=g)
    y = label(args, x)
    part = slice(rank * 4096 // world, (rank + 1) * 4096 // world)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(x[part]), y[part], reduction="sum")
    dist.all_reduce(loss)
    return loss.item() / 4096


def worker(args):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    torch.set_num_threads(args.threads)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build(args)
    if args.first_bucket_mb is not None:
        # PyTorch's documented knob for the size of DDP's first bucket (1 MiB by default).
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.first_bucket_mb * 1024 * 1024)
    hook = args.hook
    state = None
    codec = None
    fsdp_hooks = ("fsdp", "fsdp-adamw")
    fsdp_prefixes = ("fsdp-terse:", "fsdp-sharded-adam:")
    if hook in fsdp_hooks or hook.startswith(fsdp_prefixes):
        # FSDP2 instead of DDP (torch 2.8 or later): every Linear layer and the root a unit.
        # fsdp: FSDP2's own gloo collectives (fsdp-adamw: with AdamW); fsdp-terse:GRAD[/WEIGHT]:
        # terse.fsdp with GRAD for the gradients' reduce-scatter and WEIGHT (default none) for the
        # weights' all-gather; fsdp-sharded-adam:CODEC[/WEIGHT]: FSDPShardedOneBitAdam taking over
        # the reduce-scatter with CODEC (error feedback where it wants it), weights as above.
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                fully_shard(m, mesh=mesh)
        fully_shard(model, mesh=mesh)
        ddp = model
        if hook not in fsdp_hooks:
            import terse.fsdp
            grad, _, weight = hook.partition(":")[2].partition("/")
            sharded = hook.startswith("fsdp-sharded-adam:")
            state = terse.fsdp.apply(model, grad_codec="none" if sharded else grad,
                                     weight_codec=weight or "none")
            codec = f"{grad if sharded else state.units[0][1].codec} / {state.units[0][2].codec}"
    else:
        ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    if hook in fsdp_hooks or hook.startswith(fsdp_prefixes):
        pass
    elif hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.psgd_rank,
                                   start_powerSGD_iter=10)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
    elif hook.startswith(("terse:", "terse-sync:")):
        import terse.ddp
        kind, _, spec = hook.partition(":")
        state = terse.ddp.register(ddp, spec, overlap=kind == "terse")
    elif hook.startswith("onebit-adam:"):
        pass   # the optimizer below attaches its own hook
    elif hook not in ("ddp", "adamw"):
        sys.exit(f"unknown --hook {hook}")
    if hook.startswith("fsdp-sharded-adam:"):
        from terse.comm import codec_info
        from terse.sharded_optim import FSDPShardedOneBitAdam
        # Its warm-up ends before the timed steps start, as OneBitAdam's below.
        opt = FSDPShardedOneBitAdam(model, lr=args.adam_lr, weight_decay=0.01, codec=grad,
                                    error_feedback=codec_info(grad)[1],
                                    warmup_steps=max(1, args.warmup // 2),
                                    communicator=state.communicator)
    elif hook in ("adamw", "fsdp-adamw"):
        # DDP's own allreduce with AdamW: the baseline of terse.optim.OneBitAdam (docs/optim.md).
        opt = torch.optim.AdamW(model.parameters(), lr=args.adam_lr, weight_decay=0.01)
    elif hook.startswith("onebit-adam:"):
        import terse.optim
        # Its warm-up ends before the timed steps start, so the figure is the compressed phase's.
        opt = terse.optim.OneBitAdam(model.parameters(), lr=args.adam_lr, weight_decay=0.01,
                                     codec=hook.partition(":")[2],
                                     warmup_steps=max(1, args.warmup // 2))
        opt.attach(ddp)
        state = opt
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    params = sum(p.numel() for p in model.parameters())

    losses, times = [], []
    dist.barrier()
    start = None
    for step in range(args.steps):
        if step == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        t0 = time.perf_counter()
        x, y = data(args, step, rank, world)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    dist.barrier()
    elapsed = time.perf_counter() - start
    tail = torch.tensor(sum(losses[-10:]) / len(losses[-10:]))
    dist.all_reduce(tail)
    result = {
        "hook": hook,
        "codec": codec or getattr(state, "spec", getattr(state, "codec", None)),
        "world": world,
        "params": params,
        "steps": args.steps,
        "timed_steps": args.steps - args.warmup,
        "steps_per_s": (args.steps - args.warmup) / elapsed,
        "median_step_ms": sorted(times[args.warmup:])[len(times[args.warmup:]) // 2] * 1e3,
        "train_loss_last10": tail.item() / world,
        "held_out_loss": held_out_loss(args, model, rank, world),
        "first_loss": losses[0],
        "torch": torch.__version__,
    }
    if rank == 0:
        print(json.dumps(result), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    finish()


def finish():
    """Ends a worker once every rank is done. On Debian's torch 1.13 both ways of ending a gloo
    job failed now and then in our runs: exiting with the group alive aborted in gloo's
    destructors ("terminate called without an active exception", pytorch/pytorch#190489), and
    destroy_process_group() hung on rank 0. So: a barrier, terse's communicator closed, then an
    exit that skips the interpreter's teardown."""
    import torch.distributed as dist
    dist.barrier()
    if "terse.ddp" in sys.modules:
        sys.modules["terse.ddp"].shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# overhead: what the Python layer adds to one call (a world of one, so no network is involved)

def overhead(args):
    import ctypes
    import timeit
    import torch
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import terse
    import terse.ddp
    from terse import _lib
    comm = terse.ddp.default_communicator()
    lib = _lib.lib()
    x = torch.zeros(1)
    ptr = ctypes.c_void_p(x.data_ptr())

    def best(fn):  # best of 5 x 5000 calls, in microseconds
        return min(timeit.repeat(fn, number=5000, repeat=5)) / 5000 * 1e6

    raw = best(lambda: lib.terse_allreduce(comm._handle, ptr, ptr, 1, _lib.FLOAT32, _lib.AVG,
                                           b"none", None))
    wrapped = best(lambda: comm.allreduce(x))

    class Bucket:  # GradBucket's interface: 8 parameters in a 1-float-each bucket
        params = [torch.nn.Parameter(torch.zeros(1)) for _ in range(8)]
        t = torch.zeros(8)
        buffer = lambda self: self.t
        index = lambda self: 0
        parameters = lambda self: self.params
    sync = terse.ddp.TerseState("none", overlap=False)
    hook = best(lambda: terse.ddp.terse_hook(sync, Bucket()))
    # Last: the first overlapping call starts the communicator's queue thread, behind which
    # every later call of this communicator runs.
    state = terse.ddp.TerseState("none")
    queued = best(lambda: terse.ddp.terse_hook(state, Bucket()).wait())
    print(f"terse_allreduce through ctypes, 1 float, world of one: {raw:.1f} us")
    print(f"Communicator.allreduce (argument checks + ctypes):    {wrapped:.1f} us "
          f"(+{wrapped - raw:.1f})")
    print(f"terse_hook, overlap=False, 8-parameter bucket:        {hook:.1f} us "
          f"(+{hook - raw:.1f})")
    print(f"terse_hook (overlap) and the future's wait():         {queued:.1f} us "
          f"(+{queued - raw:.1f})")


# ---------------------------------------------------------------------------------------------
# compare

def worker_args(args):
    return ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
            "--features", str(args.features), "--hidden", str(args.hidden), "--depth",
            str(args.depth), "--lr", str(args.lr), "--adam-lr", str(args.adam_lr), "--seed",
            str(args.seed), "--psgd-rank", str(args.psgd_rank), "--threads", str(args.threads),
            "--bucket-mb", str(args.bucket_mb)] + (["--first-bucket-mb", str(args.first_bucket_mb)]
                                    if args.first_bucket_mb is not None else [])


def free_port_pair():
    """A port p with p and p + 1 both free on loopback (torchrun's store on p, terse's on
    p + 1). Drawn below the kernel's ephemeral range (ip_local_port_range), which the kernel
    hands out to outgoing connections: a pair drawn inside it could be taken between this check
    and torchrun's bind by any client socket, even one of the job's own connections to p (seen
    in CI: terse's store found p + 1 taken). Another process that binds a fixed port may still
    take them; that window is short, unlike a fixed port range every concurrent job shares."""
    import random
    import socket
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    lo = max(lo, 2048)
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(1024, lo - 1)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", p))
                b.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    sys.exit("ddp_hooks: found no two consecutive free ports on 127.0.0.1 below the ephemeral "
             "range")


def run_port(args, k):
    """MASTER_PORT of the k-th run. --port 0 on loopback picks a free pair anew for each run;
    in namespaces (own port space, nothing else bound there) and with an explicit --port, runs
    step through PORT, PORT+2, ... so that no run waits for its predecessor's sockets to
    leave TIME_WAIT."""
    if args.port == 0 and not args.netns:
        return free_port_pair()
    base = args.port or 29600
    return base + (2 * k) % 2000


def run_one(args, hook, out_json, port):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    lib = os.path.join(ROOT, "build", "lib", "libterse.so")
    if "TERSE_LIBRARY" not in env and os.path.exists(lib):
        env["TERSE_LIBRARY"] = lib
    env.setdefault("TERSE_CPU_THREADS", str(args.threads))
    # Debian's torch 1.13 under Python 3.11 cannot parse torchrun's default --redirects 0
    # (IntFlag iteration skips zero): tee stdout through the log directory instead.
    common = [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
              "--master_port", str(port)]
    script = [os.path.abspath(__file__), "worker", "--hook", hook, "--json", out_json]
    script += worker_args(args)
    logs = os.path.join(os.path.dirname(out_json), "logs")
    if not args.netns:
        env.setdefault("UCX_NET_DEVICES", "lo")
        cmd = common + ["--nproc_per_node", str(args.nproc), "--master_addr", "127.0.0.1",
                        "--log_dir", os.path.join(logs, "all")] + script
        print("+", " ".join(cmd), flush=True)
        return subprocess.run(cmd, env=env, timeout=args.timeout).returncode
    # One torchrun "node" per namespace; traffic leaves through eth0 only (UCX would otherwise
    # use shared memory between the namespaces, which share the machine).
    env.update(UCX_TLS="tcp", UCX_NET_DEVICES="eth0", GLOO_SOCKET_IFNAME="eth0")
    procs = []
    for r in range(args.nproc):
        cmd = ["ip", "netns", "exec", f"{args.netns}-h{r + 1}"] + common + [
            "--nnodes", str(args.nproc), "--node_rank", str(r), "--nproc_per_node", "1",
            "--master_addr", args.netns_master, "--log_dir", os.path.join(logs, f"node{r}")]
        cmd += script
        if r == 0:
            print("+", " ".join(cmd), f"(and nodes 1..{args.nproc - 1})", flush=True)
        # Each namespace is its own emulated host: say so, or terse's node keys (hostname and
        # boot id, shared by the namespaces) would put every rank on one node.
        procs.append(subprocess.Popen(cmd, env=dict(env, TERSE_NODE=f"{args.netns}-h{r + 1}")))
    deadline = time.time() + args.timeout
    rc = 0
    for p in procs:
        try:
            rc = rc or p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            rc = 124
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rc


def table(results, args):
    base = next((r for r in results if r["hook"] in ("ddp", "adamw", "fsdp", "fsdp-adamw")),
                results[0])
    lines = [f"| hook | codec | steps/s (best of {args.repeat}) | vs DDP allreduce | all runs "
             f"(steps/s) | median step (ms) | train loss (last 10) | held-out loss |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    names = {"ddp": "DDP allreduce (gloo), no hook", "fp16": "PyTorch fp16_compress_hook (gloo)",
             "powersgd": f"PyTorch powerSGD_hook rank {args.psgd_rank} (gloo)",
             "adamw": "AdamW, DDP allreduce (gloo)", "fsdp": "FSDP2 (gloo)",
             "fsdp-adamw": "AdamW, FSDP2 (gloo)"}
    for r in results:
        name = names.get(r["hook"], "terse_hook, overlap=False" if r["hook"].startswith(
            "terse-sync:") else "terse.optim.OneBitAdam" if r["hook"].startswith(
            "onebit-adam:") else "terse.fsdp (grads / weights)" if r["hook"].startswith(
            "fsdp-terse:") else "FSDPShardedOneBitAdam (grads / weights)" if r["hook"].startswith(
            "fsdp-sharded-adam:") else "terse_hook")
        lines.append(f"| {name} | {r['codec'] or '-'} | {r['steps_per_s']:.2f} | "
                     f"{r['steps_per_s'] / base['steps_per_s']:.2f}x | "
                     f"{' '.join(f'{v:.2f}' for v in r['steps_per_s_all'])} | "
                     f"{r['median_step_ms']:.1f} | "
                     f"{r['train_loss_last10']:.4f} | {r['held_out_loss']:.4f} |")
    return "\n".join(lines)


def compare(args):
    out = args.out or os.path.join(ROOT, "bench-results", "pytorch-" +
                                   time.strftime("%Y%m%d-%H%M%S", time.gmtime()))
    os.makedirs(out, exist_ok=True)
    hooks = args.hooks.split() if args.hooks else DEFAULT_HOOKS
    runs = {hook: [] for hook in hooks}
    # Round robin over the hooks, --repeat times: on a shared machine the load drifts over
    # minutes, and interleaving spreads that drift over every hook instead of a few.
    for rep in range(args.repeat):
        for i, hook in enumerate(hooks):
            name = hook.replace(":", "_").replace("=", "")
            path = os.path.join(out, f"{name}.{rep}.json")
            rc = run_one(args, hook, path, run_port(args, i + rep * len(hooks)))
            if rc != 0 or not os.path.exists(path):
                sys.exit(f"ddp_hooks: the run with --hook {hook} failed (exit {rc}); logs in "
                         f"{out}/logs")
            with open(path) as f:
                runs[hook].append(json.load(f))
    results = []
    for hook in hooks:
        best = dict(max(runs[hook], key=lambda r: r["steps_per_s"]))
        best["steps_per_s_all"] = [r["steps_per_s"] for r in runs[hook]]
        results.append(best)
    text = table(results, args)
    r0 = results[0]
    where = (f"{args.nproc} namespaces ({args.netns}-h*)" if args.netns else
             f"{args.nproc} ranks on one machine, loopback")
    header = (f"{r0['params']:,} parameters, {args.batch} rows per rank per step, "
              f"{args.steps} steps ({args.steps - args.warmup} timed), {where}, torch "
              f"{r0['torch']}")
    header += "\n\ncommand: " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    print("\n" + header + "\n\n" + text)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(header + "\n\n" + text + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=1)
    print(f"\nwritten: {out}/table.md, {out}/results.json")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["compare", "worker", "overhead"])
    p.add_argument("--hook", default="ddp",
                   help="worker: ddp, fp16, powersgd or terse:SPEC (SGD); adamw (DDP's allreduce) "
                        "or onebit-adam:SPEC (terse.optim.OneBitAdam) with Adam; under FSDP2: fsdp "
                        "or fsdp-terse:GRAD[/WEIGHT] (SGD), fsdp-adamw or "
                        "fsdp-sharded-adam:CODEC[/WEIGHT] (terse.sharded_optim."
                        "FSDPShardedOneBitAdam)")
    p.add_argument("--hooks", help='compare: space-separated hooks (default: all of '
                   + " ".join(DEFAULT_HOOKS) + ")")
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=32, help="rows per rank per step")
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--adam-lr", type=float, default=1e-3,
                   help="learning rate of --hook adamw and onebit-adam:SPEC")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--psgd-rank", type=int, default=2)
    p.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    p.add_argument("--first-bucket-mb", type=float, default=25,
                   help="size of DDP's first bucket (PyTorch's own default is 1 MiB). 25 puts "
                        "the default model in one bucket: powerSGD_hook over gloo with several "
                        "buckets aborted in gloo for us (PyTorch 1.13, docs/pytorch.md)")
    p.add_argument("--threads", type=int, default=1, help="torch and terse CPU threads per rank")
    p.add_argument("--json", help="worker: write rank 0's result here")
    p.add_argument("--out", help="compare: results directory (default bench-results/pytorch-*)")
    p.add_argument("--port", type=int, default=0,
                   help="compare: torchrun's MASTER_PORT of the first run (+2 per run; terse "
                        "uses MASTER_PORT+1). 0: on loopback a free pair for each run, in "
                        "namespaces 29600")
    p.add_argument("--timeout", type=int, default=1200, help="compare: limit per run (s)")
    p.add_argument("--repeat", type=int, default=1,
                   help="compare: runs per hook, round robin; the table shows the fastest")
    p.add_argument("--netns", help="compare: namespace prefix (PREFIX-h1..); needs root")
    p.add_argument("--netns-master", default="10.213.0.1",
                   help="compare: address of PREFIX-h1 (bench-network.sh's host 1)")
    args = p.parse_args()
    if args.warmup >= args.steps:
        p.error("--warmup must be below --steps")
    {"worker": worker, "compare": compare, "overhead": overhead}[args.mode](args)


if __name__ == "__main__":
    main()
