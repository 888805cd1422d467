#!/usr/bin/env python3
"""terse's torch.distributed backend (python/terse/backend.py) against gloo, in one invocation
(issue 47 item 6; docs/pytorch.md, "The backend against gloo").

  drive --backends "gloo terse terse:int8" [--rounds N] [--size 64M] [--netns PREFIX --net A.B.C]
      runs the worker once per backend and round, the backends in turn (a load that drifts on a
      shared machine weighs on each alike), and prints each backend's table and the ratios
      terse/gloo as speed-ups (gloo's time / terse's time; for DDP terse's steps/s / gloo's),
      the median over the rounds. Locally the ranks run under torchrun; with --netns each rank
      runs in its emulated host's namespace PREFIX-h<rank+1> at NET.<rank+1>, torch's store at
      rank 0's address (scripts/bench-torch-backend.sh --network builds them).
  worker --backend B: one rank (torchrun's or the driver's RANK/WORLD_SIZE/MASTER_ADDR/...):
      times all_reduce, all_gather_into_tensor and reduce_scatter_tensor on float32 and DDP
      steps of a small MLP, on one process group of backend B, and rank 0 writes JSON.

Backends: "gloo"; "terse" (exact, codec none); "terse:CODEC" (a group whose float SUM/AVG
reductions use CODEC, error feedback as the codec wishes: terse.backend.Options). Only one kind
of process group exists in a run; the slowest rank's times are found after the timing by an
all_reduce MAX on that same group.

Sizes: SIZE is the whole float32 tensor each collective moves: all_reduce's tensor,
all_gather_into_tensor's output (each rank's input is SIZE / world) and reduce_scatter_tensor's
input (each rank's output is SIZE / world), as nccl-tests count them. Each timed call follows a
barrier, so a call's time is its own, not the queue of earlier ones; the figure is the median
over the calls of the slowest rank's time.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def human(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}iB"
    return f"{n} B"


# ---- worker ------------------------------------------------------------------------------------

def worker(args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # 4 ranks share 2 cores here: torch's own threads would fight them

    kind, _, codec = args.backend.partition(":")
    kwargs = {}
    if kind == "terse":
        import terse.backend
        kwargs["pg_options"] = terse.backend.Options(codec=codec or "none")
    elif kind != "gloo":
        sys.exit(f"torch_backend_bench: unknown backend {args.backend!r} (gloo, terse, "
                 f"terse:CODEC)")
    dist.init_process_group(kind, **kwargs)
    rank, world = dist.get_rank(), dist.get_world_size()

    count = parse_size(args.size) // 4
    count -= count % world
    part = count // world
    gen = torch.Generator().manual_seed(rank)
    big = torch.randn(count, generator=gen)
    small = torch.randn(part, generator=gen)
    work = big.clone()
    calls = {
        "all_reduce": lambda: dist.all_reduce(work),
        "all_gather": lambda: dist.all_gather_into_tensor(work, small),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(small, work),
    }
    times = {}
    for name in COLLECTIVES:
        per_call = []
        for i in range(args.warmup + args.iters):
            work.copy_(big)  # all_reduce works in place: every call starts from the same data
            dist.barrier()
            start = time.perf_counter()
            calls[name]()
            elapsed = time.perf_counter() - start
            if i >= args.warmup:
                per_call.append(elapsed)
        times[name] = per_call

    ddp = None
    if args.ddp_steps > 0:
        ddp = ddp_steps(args, rank)

    # The slowest rank's figures, on the same group (one process-group kind per run).
    flat = [t for name in COLLECTIVES for t in times[name]] + ([ddp] if ddp is not None else [])
    slowest = torch.tensor(flat, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    slowest = slowest.tolist()
    result = {"backend": args.backend, "world": world, "bytes": count * 4, "iters": args.iters}
    for k, name in enumerate(COLLECTIVES):
        calls_max = slowest[k * args.iters:(k + 1) * args.iters]
        result[name] = {"median_s": statistics.median(calls_max), "min_s": min(calls_max),
                        "calls_s": calls_max}
    if ddp is not None:
        result["ddp"] = {"steps": args.ddp_steps, "seconds": slowest[-1],
                         "steps_per_s": args.ddp_steps / slowest[-1],
                         "params": args.ddp_params}
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def mlp(width, depth):
    import torch
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def ddp_steps(args, rank):
    """Seconds this rank takes for args.ddp_steps DDP steps (after 3 warm-up steps)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.manual_seed(0)
    model = mlp(args.ddp_width, args.ddp_depth)
    args.ddp_params = sum(p.numel() for p in model.parameters())
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(args.ddp_batch, args.ddp_width, generator=gen)
    y = torch.randint(0, 10, (args.ddp_batch,), generator=gen)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss_fn(ddp(x), y).backward()
        opt.step()
    for _ in range(3):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.ddp_steps):
        step()
    return time.perf_counter() - start


# ---- driver ------------------------------------------------------------------------------------

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_backend(args, backend, out):
    """One run of `worker` on every rank; returns rank 0's JSON (or exits naming the failure)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TERSE_STORE", None)
    worker_args = [os.path.abspath(__file__), "worker", "--backend", backend, "--size",
                   args.size, "--iters", str(args.iters), "--warmup", str(args.warmup),
                   "--ddp-steps", str(args.ddp_steps), "--ddp-width", str(args.ddp_width),
                   "--ddp-depth", str(args.ddp_depth), "--ddp-batch", str(args.ddp_batch),
                   "--out", out]
    if not args.netns:
        env.setdefault("UCX_NET_DEVICES", "lo")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs = [subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.world),
             "--master_addr", "127.0.0.1", "--master_port", str(free_port())] + worker_args,
            env=env, start_new_session=True)]
    else:
        # One rank per emulated host; torchrun cannot span namespaces, so the rendezvous is
        # torch's env:// (rank 0's host address) set here per rank.
        port = 29531
        procs = []
        for r in range(args.world):
            ns = f"{args.netns}-h{r + 1}"
            rank_env = dict(env, RANK=str(r), WORLD_SIZE=str(args.world), LOCAL_RANK="0",
                            LOCAL_WORLD_SIZE="1", MASTER_ADDR=f"{args.net}.1",
                            MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="eth0",
                            UCX_NET_DEVICES="eth0", UCX_TLS="tcp", TERSE_NODE=ns,
                            # c10d warns that the namespaces' addresses have no host name
                            TORCH_CPP_LOG_LEVEL="ERROR")
            cmd = ["ip", "netns", "exec", ns, "env"] + \
                [f"{k}={v}" for k, v in sorted(rank_env.items()) if k in (
                    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES", "UCX_TLS",
                    "TERSE_NODE", "PYTHONPATH", "OMP_NUM_THREADS", "TORCH_CPP_LOG_LEVEL")] + \
                [sys.executable] + worker_args
            procs.append(subprocess.Popen(cmd, env=rank_env, start_new_session=True))
    # The first rank to fail (or the deadline) ends the run: its peers would otherwise wait
    # for it until terse's or torch's timeout.
    deadline = time.monotonic() + args.timeout
    failed = None
    while failed is None and any(p.poll() is None for p in procs):
        failed = next((p.returncode for p in procs if p.returncode not in (None, 0)), None)
        if time.monotonic() > deadline:
            failed = "timeout"
        time.sleep(0.2)
    if failed is None:
        failed = next((p.returncode for p in procs if p.returncode != 0), None)
    if failed is not None:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        sys.exit(f"torch_backend_bench: FAILED: backend {backend} ({'ran past --timeout' if failed == 'timeout' else f'exit status {failed}'}; its output is above)")
    with open(out) as f:
        return json.load(f)


def table(result, label):
    lines = [f"== {result['backend']}: {result['world']} ranks, {human(result['bytes'])} float32, "
             f"{label}; median of {result['iters']} calls, slowest rank",
             f"   {'collective':<16}{'ms':>10}{'min ms':>10}{'GB/s algo':>11}"]
    for name in COLLECTIVES:
        r = result[name]
        lines.append(f"   {name:<16}{r['median_s'] * 1e3:>10.1f}{r['min_s'] * 1e3:>10.1f}"
                     f"{result['bytes'] / r['median_s'] / 1e9:>11.3f}")
    if "ddp" in result:
        d = result["ddp"]
        lines.append(f"   {'DDP steps/s':<16}{d['steps_per_s']:>10.2f}   ({d['steps']} steps, "
                     f"{d['params'] * 4 / 2**20:.1f} MiB of parameters)")
    return "\n".join(lines)


def drive(args):
    backends = args.backends.split()
    bad = [b for b in backends if b != "gloo" and b.partition(":")[0] != "terse"]
    if bad:
        sys.exit(f"torch_backend_bench: unknown backend {bad[0]!r} (gloo, terse, terse:CODEC)")
    if "gloo" not in backends:
        sys.exit("torch_backend_bench: --backends must include gloo (the ratios' baseline)")
    cores = os.cpu_count() or 1
    label = (f"emulated {args.link} link per rank, one rank per network namespace"
             if args.netns else "one machine")
    print(f"== torch backend bench: {', '.join(backends)}; {args.world} ranks, {label}; "
          f"{cores} CPU cores{' (ranks oversubscribe them)' if args.world > cores else ''}")
    rows = {b: [] for b in backends if b != "gloo"}
    kinds = list(COLLECTIVES) + (["ddp"] if args.ddp_steps > 0 else [])
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"== round {round_} of {args.rounds}")
            results = {}
            for b in backends:
                results[b] = run_backend(args, b, os.path.join(tmp, "result.json"))
                print(table(results[b], label), flush=True)
            gloo = results["gloo"]
            for b in rows:
                ratio = {name: gloo[name]["median_s"] / results[b][name]["median_s"]
                         for name in COLLECTIVES}
                if "ddp" in kinds:
                    ratio["ddp"] = results[b]["ddp"]["steps_per_s"] / gloo["ddp"]["steps_per_s"]
                rows[b].append(ratio)
                print(f"   speed-up of {b} over gloo: " +
                      ", ".join(f"{k} {ratio[k]:.2f}x" for k in kinds), flush=True)
    title = f"median over {args.rounds} rounds" if args.rounds > 1 else "one round"
    print(f"== speed-up over gloo (gloo's time / the backend's; DDP: steps/s ratio), {title}, "
          f"{args.world} ranks, {human(gloo['bytes'])}, {label}")
    print(f"   {'backend':<14}" + "".join(f"{k:>22}" for k in kinds))
    for b, ratios in rows.items():
        cells = []
        for k in kinds:
            values = sorted(r[k] for r in ratios)
            cell = f"{statistics.median(values):.2f}x"
            if len(values) > 1:
                cell += f" ({values[0]:.2f}-{values[-1]:.2f})"
            cells.append(f"{cell:>22}")
        print(f"   {b:<14}" + "".join(cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"label": label, "world": args.world, "ratios": rows}, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=["drive", "worker"])
    p.add_argument("--backend", default="gloo", help="worker: gloo, terse or terse:CODEC")
    p.add_argument("--backends", default="gloo terse terse:int8", help="drive: in turn")
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--size", default="64M", help="float32 bytes per collective (K/M/G)")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--ddp-steps", type=int, default=10, help="0: no DDP mode")
    p.add_argument("--ddp-width", type=int, default=1024)
    p.add_argument("--ddp-depth", type=int, default=3, help="hidden layers of width^2")
    p.add_argument("--ddp-batch", type=int, default=32)
    p.add_argument("--netns", default="", help="drive: namespace prefix of emulated hosts")
    p.add_argument("--net", default="10.213.0", help="drive: host i's address is NET.i")
    p.add_argument("--link", default="", help="drive: the link's description, for the tables")
    p.add_argument("--timeout", type=float, default=600, help="drive: seconds per run")
    p.add_argument("--out", default="", help="worker: rank 0's JSON")
    p.add_argument("--json", default="", help="drive: the ratios as JSON")
    args = p.parse_args()
    if args.mode == "worker":
        worker(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
