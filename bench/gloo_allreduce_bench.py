"""gloo's allreduce (torch.distributed) measured the way terse-bench and mpi-allreduce-bench
measure theirs, for a baseline in the same script: same sizes, warm-up and timed calls, the
slowest rank's average time, the same columns.

    python -m torch.distributed.run --nproc-per-node 4 bench/gloo_allreduce_bench.py \\
        -b 4K -e 1M -f 4 -n 1000 -w 100
"""
import argparse
import os
import sys
import time


def size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", type=size, default=size("4K"), help="smallest message in bytes")
    ap.add_argument("-e", type=size, default=size("1M"), help="largest message in bytes")
    ap.add_argument("-f", type=float, default=2.0, help="factor between sizes")
    ap.add_argument("-n", type=int, default=100, help="timed calls per size")
    ap.add_argument("-w", type=int, default=10, help="warm-up calls per size")
    args = ap.parse_args()
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        sys.exit(f"gloo-allreduce-bench: torch is not importable ({e}); scripts/torch-env.sh "
                 "makes an environment with it")
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"# gloo-allreduce-bench: {n} ranks, float32 sum, {args.w} warmup + {args.n} timed "
              f"calls (torch {torch.__version__})")
        print(f"#{'size(B)':>11} {'count':>12} {'time(us)':>10} {'algbw':>8} {'busbw':>8}")
    nbytes = max(4, args.b)
    factor = args.f if args.f > 1 else 2.0
    while nbytes <= max(args.e, args.b):
        count = nbytes // 4
        t = torch.ones(count, dtype=torch.float32)
        for _ in range(args.w):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.n):
            dist.all_reduce(t)
        seconds = torch.tensor([(time.perf_counter() - start) / args.n], dtype=torch.float64)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank's time per call
        if rank == 0:
            s = seconds.item()
            algbw = count * 4 / s / 1e9
            print(f"{count * 4:12d} {count:12d} {s * 1e6:10.1f} {algbw:8.3f} "
                  f"{algbw * 2 * (n - 1) / n:8.3f}", flush=True)
        nbytes = int(nbytes * factor)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
