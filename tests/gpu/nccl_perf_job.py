#!/usr/bin/env python3
"""An NCCL job timed end to end (issue #45 item 3; scripts/device-check.sh stages nccl-perf,
ddp and netem): two processes on one GPU, each told it is its own host (NCCL_HOSTID), so NCCL
must connect them over the network, as tests/gpu/nccl_plugin_job.py does. Our own timer, in the
manner of nccl-tests' all_reduce_perf (none of its code):

  allreduce  --transport T: torch.distributed.all_reduce (sum, float32, in place) of every size
             from --min to --max (times --factor), timed with CUDA events around each call (the
             input restored before each call, outside the events), iterations chosen per size so
             that each size takes about --time-per-size seconds; algbw = bytes / time, busbw =
             algbw * 2(n-1)/n (nccl-tests' factor); maxrelerr against the exact sum of both
             ranks' inputs; NCCL's algorithm for each size read from its log.
  ddp        --transport T: a PyTorch DDP training step (NCCL backend, bf16 autocast, AdamW) on a
             GPT-style transformer of about 100M parameters (12 layers, width 768, vocabulary
             16384), --steps steps or as many as fit in --seconds (both ranks agree on the count
             through a TCPStore), steps/s after --warmup steps and every step's loss.

Transports (T): socket (NCCL's own Socket transport, no plugin), net (libnccl-net-terse.so,
NCCL_NET=terse), collnet-<codec> (the plugin with NCCL_COLLNET_ENABLE=1 and
TERSE_COLLNET_CODEC=<codec>: none, fp16, int8, mxfp8, ...).

--netns PREFIX --addr-net NET runs rank r inside network namespace PREFIX-h<r+1> at NET.<r+1>
(made and shaped by scripts/lib/netns.sh: the emulated links of scripts/bench-network.sh) with
eth0 for NCCL, UCX and terse; without it everything goes over loopback (lo).

  python3 tests/gpu/nccl_perf_job.py allreduce --transport socket --work DIR
  python3 tests/gpu/nccl_perf_job.py ddp --transport collnet-int8 --plugin P --work DIR
  python3 tests/gpu/nccl_perf_job.py allreduce --transport net --plan   # no GPU needed

--plan prints the sizes and each rank's environment and exits (the dry run's check of this
script's CPU-side logic). Writes DIR/<mode>-<transport><tag>.json and each rank's log next to
it. Exit 0 when the job ran, 1 on a failure, 77 when torch has no CUDA or no NCCL.
"""
import argparse
import datetime
import json
import os
import re
import socket
import subprocess
import sys
import time

SKIP = 77
ALGO = re.compile(r"AllReduce: (\d+) Bytes -> Algo (\S+) proto (\S+)")


def parse_size(text):
    """'4M', '1G', '65536', '512K' -> bytes (powers of 1024, as nccl-tests reads them)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KkMmGg]?)[Bb]?\s*", str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 4M, 1G)")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    if value < 4 or value % 4:
        raise argparse.ArgumentTypeError(f"size '{text}' is not a positive multiple of 4 bytes")
    return value


def sizes_of(lo, hi, factor):
    if factor <= 1:
        raise ValueError("--factor must be above 1")
    if hi < lo:
        raise ValueError("--max is below --min")
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s = max(s + 4, int(s * factor) // 4 * 4)
    return out


def check_transport(t):
    if t in ("socket", "net") or re.fullmatch(r"collnet-[a-z0-9]+(:[a-z0-9=,]+)?", t):
        return t
    raise argparse.ArgumentTypeError(f"unknown transport '{t}' (socket, net, collnet-<codec>)")


def rank_env(transport, rank, world, plugin, iface, master, port, store_port):
    """The environment of one rank: NCCL forced onto the network, and the transport's settings."""
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": master,
           "MASTER_PORT": str(port), "TERSE_JOB_STORE_PORT": str(store_port), "NCCL_HOSTID": f"terse-host-{rank}",
           "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
           "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,TUNING,COLL",
           "NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface,
           "CUDA_VISIBLE_DEVICES": "0"}
    if transport == "socket":
        # No plugin named (the driver also drops an inherited NCCL_NET_PLUGIN): NCCL's own.
        env.update(NCCL_NET="Socket", NCCL_COLLNET_ENABLE="0")
    else:
        env.update(NCCL_NET="terse", NCCL_NET_PLUGIN=plugin, UCX_NET_DEVICES=iface,
                   TERSE_NET_IFNAME=iface, TERSE_TIMEOUT_MS="60000",
                   NCCL_COLLNET_ENABLE="1" if transport.startswith("collnet-") else "0")
        if transport.startswith("collnet-"):
            env["TERSE_COLLNET_CODEC"] = transport[len("collnet-"):]
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def algorithms_from_log(text):
    """{bytes: 'ALGO/proto'} from NCCL's TUNING lines (the last choice seen for each size)."""
    out = {}
    for m in ALGO.finditer(text):
        out[int(m.group(1))] = f"{m.group(2)}/{m.group(3)}"
    return out


def algorithm_counts(text):
    """How many calls NCCL ran with each 'ALGO/proto' (whether CollNet carried DDP's buckets)."""
    counts = {}
    for m in ALGO.finditer(text):
        key = f"{m.group(2)}/{m.group(3)}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def log_facts(text):
    return {"nccl_algorithms": algorithm_counts(text),"net_plugin_loaded": bool(re.search(r"Loaded net plugin", text)),
            "using_network": (re.search(r"Using network (\S+)", text) or [None, None])[1],
            "collnet_connected": bool(re.search(r"CollNet/terse : rank \d+ of \d+ connected",
                                                text))}


def driver(args):
    tag = args.tag or ""
    name = f"{args.mode}-{args.transport}{tag}"
    iface = "eth0" if args.netns else "lo"
    master = f"{args.addr_net}.1" if args.netns else "127.0.0.1"
    port, store_port = free_port(), free_port()
    plugin = os.path.abspath(args.plugin)
    envs = [rank_env(args.transport, r, 2, plugin, iface, master, port, store_port)
            for r in range(2)]
    sizes = sizes_of(args.min, args.max, args.factor)
    if args.plan:
        print(f"plan {name}: sizes {sizes[0]}..{sizes[-1]} ({len(sizes)}), deadline {args.seconds} s")
        for r, env in enumerate(envs):
            where = f"ip netns exec {args.netns}-h{r + 1}" if args.netns else "here"
            print(f"  rank {r} ({where}): " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
        return 0
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"SKIP: torch is not importable ({e})")
        return SKIP
    if args.device == "cuda" and (not torch.cuda.is_available() or not dist.is_nccl_available()):
        print("SKIP: torch has no CUDA device or no NCCL")
        return SKIP
    if args.device == "cuda" and args.transport != "socket" and not os.path.exists(plugin):
        print(f"FAIL: no plugin at {plugin}")
        return 1
    os.makedirs(args.work, exist_ok=True)
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items()
               if k not in ("NCCL_NET_PLUGIN", "TERSE_COLLNET_CODEC", "NCCL_COLLNET_ENABLE")}
        env.update(envs[rank])
        cmd = [sys.executable, os.path.abspath(__file__), "worker", "--mode", args.mode,
               "--work", args.work, "--name", name, "--min", str(args.min), "--max",
               str(args.max), "--factor", str(args.factor), "--time-per-size",
               str(args.time_per_size), "--seconds", str(args.seconds), "--steps",
               str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
               "--seq", str(args.seq), "--device", args.device, "--layers",
               str(args.layers), "--width", str(args.width)]
        if args.netns:
            cmd = ["ip", "netns", "exec", f"{args.netns}-h{rank + 1}"] + cmd
        log = open(os.path.join(args.work, f"{name}-rank{rank}.log"), "w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True), log))
    # The workers stop themselves at --seconds; the margin covers start-up and NCCL's set-up.
    deadline = time.monotonic() + args.seconds + 45
    hung = False
    for p, log in procs:
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(p.pid, 9)
            p.wait()
        log.close()
    texts = []
    for rank in range(2):
        with open(os.path.join(args.work, f"{name}-rank{rank}.log"), errors="replace") as f:
            texts.append(f.read())
    res_path = os.path.join(args.work, f"{name}-result0.json")
    result = json.load(open(res_path)) if os.path.exists(res_path) else None
    failures = []
    if hung:
        failures.append(f"the ranks did not finish within {args.seconds + 45:.0f} s")
    for rank, (p, _) in enumerate(procs):
        if p.returncode != 0:
            tail = [line for line in texts[rank].splitlines() if line.strip()][-3:]
            failures.append(f"rank {rank} exited with {p.returncode}: " + " | ".join(tail))
    algos = algorithms_from_log(texts[0])
    summary = dict(log_facts(texts[0]), mode=args.mode, transport=args.transport,
                   link=args.link, failures=failures + (result or {}).get("failures", []))
    if result:
        summary.update({k: v for k, v in result.items() if k != "failures"})
        for row in summary.get("rows", []):
            row["algo"] = algos.get(row["bytes"], "?")
    with open(os.path.join(args.work, f"{name}.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for row in summary.get("rows", []):
        print(f"{row['bytes']:>12} {row['time_us']:>12.1f} us  algbw {row['algbw_gbs']:8.3f}  "
              f"busbw {row['busbw_gbs']:8.3f} GB/s  err {row['maxrelerr']:.2e}  {row['algo']}")
    if "steps_per_s" in summary:
        print(f"ddp: {summary['params'] / 1e6:.1f}M parameters, {summary['steps']} steps, "
              f"{summary['steps_per_s']:.3f} steps/s, loss {summary['losses'][0]:.4f} -> "
              f"{summary['losses'][-1]:.4f}")
    print(f"NOTE {name} ({args.link}): plugin loaded {summary['net_plugin_loaded']}, network "
          f"{summary['using_network']}, CollNet connected {summary['collnet_connected']}")
    if summary["failures"]:
        print("FAIL: " + "; ".join(summary["failures"]))
        return 1
    print(f"ok: {name} ({args.link})")
    return 0


def worker(args):
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    t_start = time.monotonic()
    # Our own store: both ranks agree on iteration counts and stops through it, never through a
    # collective that a compressing CollNet could change.
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["TERSE_JOB_STORE_PORT"]),
                          world, rank == 0, timeout=datetime.timedelta(seconds=120))
    if args.device == "cuda":
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    else:  # the dry run's smoke test of this code: gloo on the CPU, tiny sizes
        dev = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)

    def agree(key, value):
        """Rank 0's value, on every rank."""
        if rank == 0:
            store.set(key, str(value))
            return value
        return type(value)(store.get(key).decode())

    v = torch.cuda.nccl.version() if args.device == "cuda" else "gloo (CPU smoke test)"
    out = {"nccl": ".".join(map(str, v)) if isinstance(v, tuple) else str(v), "ranks": world,
           "device": args.device, "failures": []}
    try:
        if args.mode == "allreduce":
            out["rows"] = allreduce_rows(args, torch, dist, dev, rank, world, agree, t_start)
        else:
            out.update(ddp_run(args, torch, dist, dev, rank, world, agree, t_start))
    except Exception as e:  # noqa: BLE001 -- reported in the result
        out["failures"].append(f"rank {rank}: {type(e).__name__}: {e}")
    for line in out["failures"]:
        print(f"FAIL: {line}", flush=True)
    if rank == 0:
        with open(os.path.join(args.work, f"{args.name}-result0.json"), "w") as f:
            json.dump(out, f)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    # Rank 0 serves both stores: it leaves last, so no rank loses its store while tearing down.
    try:
        store.add("left", 1)
        if rank == 0:
            deadline = time.monotonic() + 30
            while store.add("left", 0) < world and time.monotonic() < deadline:
                time.sleep(0.05)
    except Exception:  # noqa: BLE001 -- a peer gone already: nothing left to wait for
        pass
    return 1 if out["failures"] else 0


class Timer:
    """CUDA events around each call on a GPU; the host clock (after the call) on the CPU."""

    def __init__(self, torch, dev):
        self.torch, self.cuda = torch, dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def span(self):
        if self.cuda:
            return [self.torch.cuda.Event(enable_timing=True),
                    self.torch.cuda.Event(enable_timing=True)]
        return [0.0, 0.0]

    def mark(self, span, i):
        if self.cuda:
            span[i].record()
        else:
            span[i] = time.perf_counter()

    def seconds(self, span):
        return span[0].elapsed_time(span[1]) / 1e3 if self.cuda else span[1] - span[0]


def allreduce_rows(args, torch, dist, dev, rank, world, agree, t_start):
    clock = Timer(torch, dev)
    sizes = sizes_of(args.min, args.max, args.factor)
    top = sizes[-1] // 4
    srcs = []
    for r in range(world):  # every rank's input, so each can recompute the exact sum
        g = torch.Generator(device=dev).manual_seed(1000 + r)
        srcs.append(torch.rand(top, generator=g, device=dev) * 2 - 1)
    exact_all = sum(s.double() for s in srcs).float()
    buf = torch.empty(top, device=dev)
    rows = []
    busf = 2.0 * (world - 1) / world
    for i, size in enumerate(sizes):
        count = size // 4
        t = buf[:count]
        # A size starts only when rank 0 sees time for it (its warm-up call measures it).
        if agree(f"go{size}", int(time.monotonic() - t_start < args.seconds)) == 0:
            break
        span = clock.span()
        for _ in range(2 if i == 0 else 1):  # the first call also connects
            t.copy_(srcs[rank][:count])
            clock.mark(span, 0)
            dist.all_reduce(t)
            clock.mark(span, 1)
        clock.sync()
        warm = max(clock.seconds(span), 1e-6)
        left = args.seconds - (time.monotonic() - t_start)
        iters = max(1, min(50, int(min(args.time_per_size, max(left, 0)) / warm)))
        iters = agree(f"iters{size}", iters)
        spans = [clock.span() for _ in range(iters)]
        for span in spans:
            t.copy_(srcs[rank][:count])  # outside the events: in place, the input comes back
            clock.mark(span, 0)
            dist.all_reduce(t)
            clock.mark(span, 1)
        clock.sync()
        secs = sum(clock.seconds(span) for span in spans) / iters
        exact = exact_all[:count]
        err = ((t - exact).abs().max() / exact.abs().max()).item()
        algbw = size / secs / 1e9
        rows.append({"bytes": size, "count": count, "iters": iters, "time_us": secs * 1e6,
                     "algbw_gbs": algbw, "busbw_gbs": algbw * busf, "maxrelerr": err})
    return rows


def make_model(torch, vocab, width, layers, heads, seq):
    nn = torch.nn

    class Gpt(nn.Module):
        """A GPT-style decoder (pre-norm, causal, tied embedding): about 100M parameters."""

        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, width)
            self.pos = nn.Embedding(seq, width)
            layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(width)
            # GPT-2's small initial embeddings: with N(0, 1) the tied output's logits start
            # in the tens and the first loss is ~40 instead of ln(vocabulary).
            nn.init.normal_(self.tok.weight, std=0.02)
            nn.init.normal_(self.pos.weight, std=0.02)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq),
                                 persistent=False)

        def forward(self, x):
            h = self.tok(x) + self.pos.weight[: x.shape[1]]
            h = self.blocks(h, mask=self.mask, is_causal=True)
            return self.norm(h) @ self.tok.weight.t()

    return Gpt()


def ddp_run(args, torch, dist, dev, rank, world, agree, t_start):
    from torch.nn.parallel import DistributedDataParallel as DDP
    vocab, seq = 16384, args.seq
    torch.manual_seed(0)  # the same initial model on both ranks and in every transport's run
    vocab = vocab if args.width >= 768 else 512  # the smoke test's model is tiny
    model = make_model(torch, vocab, args.width, args.layers, max(1, args.width // 64), seq).to(dev)
    params = sum(p.numel() for p in model.parameters())
    ddp = DDP(model, device_ids=[0] if dev.type == "cuda" else None)
    sync = Timer(torch, dev).sync
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4)
    # Learnable synthetic text: each sequence follows a fixed random successor table from a
    # random start, so the loss falls steadily; the batches are the same in every run.
    succ = torch.randperm(vocab, generator=torch.Generator().manual_seed(7)).to(dev)

    def batch(step):
        g = torch.Generator(device=dev).manual_seed(10_000 * step + rank)
        x = torch.empty(args.batch, seq + 1, dtype=torch.long, device=dev)
        x[:, 0] = torch.randint(0, vocab, (args.batch,), generator=g, device=dev)
        for i in range(seq):
            x[:, i + 1] = succ[x[:, i]]
        return x[:, :-1], x[:, 1:]

    data = [batch(s) for s in range(8)]  # eight batches cycled: the tokens cost no time
    losses = []

    def step(s):
        x, y = data[s % len(data)]
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(ddp(x).float().view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())

    for s in range(args.warmup):
        step(s)
    sync()
    # Rank 0 times a few steps and sets how many fit in what is left of --seconds.
    t0 = time.monotonic()
    probe = min(5, args.steps - args.warmup)
    for s in range(args.warmup, args.warmup + probe):
        step(s)
    sync()
    per = (time.monotonic() - t0) / max(probe, 1)
    left = args.seconds - (time.monotonic() - t_start)
    more = max(0, min(args.steps - args.warmup - probe, int(left / per)))
    more = agree("ddp-steps", more)
    for s in range(args.warmup + probe, args.warmup + probe + more):
        step(s)
    sync()
    secs = time.monotonic() - t0
    timed = probe + more
    return {"params": params, "steps": args.warmup + timed, "timed_steps": timed,
            "steps_per_s": timed / secs, "batch": args.batch, "seq": seq,
            "tokens_per_step": args.batch * seq * world,
            "losses": [round(v, 5) for v in torch.stack(losses).tolist()]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=["allreduce", "ddp", "worker"])
    p.add_argument("--transport", type=check_transport, default="socket")
    p.add_argument("--plugin", default="build/lib/libnccl-net-terse.so")
    p.add_argument("--work", default="/tmp/terse-nccl-perf")
    p.add_argument("--min", type=parse_size, default=parse_size("4M"))
    p.add_argument("--max", type=parse_size, default=parse_size("1G"))
    p.add_argument("--factor", type=float, default=2.0)
    p.add_argument("--time-per-size", type=float, default=0.3)
    p.add_argument("--seconds", type=float, default=30, help="the job's own limit (it stops "
                   "starting sizes or steps after it)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: gloo on the CPU, the dry run's smoke test of this script")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--netns", default="")
    p.add_argument("--addr-net", default="10.47.0")
    p.add_argument("--link", default="loopback", help="a label for the rows: loopback, 10gbit")
    p.add_argument("--tag", default="", help="appended to the output's name")
    p.add_argument("--plan", action="store_true")
    p.add_argument("--mode", dest="worker_mode", default="allreduce")
    p.add_argument("--name", default="")
    args = p.parse_args(argv)
    try:
        sizes_of(args.min, args.max, args.factor)
    except ValueError as e:
        p.error(str(e))
    if args.steps < args.warmup + 1:
        p.error("--steps must exceed --warmup")
    if args.mode == "worker":
        args.mode = args.worker_mode
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
