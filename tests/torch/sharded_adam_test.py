#!/usr/bin/env python3
"""terse.sharded_optim.ShardedOneBitAdam across processes (docs/optim.md, "Sharded OneBitAdam"):

- 4 ranks, each with its own data (non-IID): the warm-up equals torch.optim.AdamW fed the
  ranks' averaged gradient (every rank computes that reference itself from all ranks' data);
- after the freeze with onebit, the parameters stay bit-identical on every rank and the loss
  keeps falling; each rank's state holds only its shard (state_bytes reported);
- every rank saves its state_dict; 2 new ranks load combine() of the 4 files and continue,
  bit-identical to each other;
- convergence: the same 4 non-IID ranks train a wider MLP for 200 steps with AdamW (OneBitAdam
  never leaving warm-up), OneBitAdam with onebit and ShardedOneBitAdam with int8 (no error
  feedback) and with onebit (warm-up 40); the sharded int8 run's held-out loss must be within 2%
  of OneBitAdam's (or below), and the sharded onebit run without error feedback (compression
  broken) must miss that bound; so must ShardedOneBitAdam with onebit + error feedback, which
  sends each rank's local momentum (local_momentum follows error_feedback). The same sending
  gradients (local_momentum=False) is reported only: it diverges on this task (docs/optim.md).

Ranks are processes of this script rendezvousing on a file store (TERSE_STORE=<directory>).
SKIP (77) without torch.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

WARMUP, STEPS, LR = 8, 40, 1e-2


def net(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))


def batch(torch, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 16, generator=g) + 0.5 * rank   # non-IID: shifted per rank
    w = torch.arange(64, dtype=torch.float32).reshape(16, 4) / 64.0
    return x, torch.tanh(x @ w) + 0.1 * rank


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def compare(args):
    """The convergence comparison (one rank's part); writes the held-out losses."""
    import torch
    import terse
    import terse.optim
    from terse.sharded_optim import ShardedOneBitAdam
    torch.set_num_threads(1)
    comm = terse.comm.Communicator()
    rank, world = comm.rank, comm.size

    def wide():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 256), torch.nn.Tanh(),
                                   torch.nn.Linear(256, 4))

    def held_out(m):
        with torch.no_grad():
            return sum(torch.nn.functional.mse_loss(m(x), y).item()
                       for x, y in (batch(torch, r, 10_000 + k) for r in range(world)
                                    for k in range(4))) / (4 * world)

    results = {}
    runs = [("adamw", lambda p: terse.optim.OneBitAdam(p, lr=LR, weight_decay=0.01,
                                                        warmup_steps=10_000, communicator=comm)),
            ("onebit_adam", lambda p: terse.optim.OneBitAdam(p, lr=LR, weight_decay=0.01,
                                                              codec="onebit", warmup_steps=40,
                                                              communicator=comm)),
            ("sharded", lambda p: ShardedOneBitAdam(p, lr=LR, weight_decay=0.01, codec="int8",
                                                    warmup_steps=40, error_feedback=False,
                                                    communicator=comm)),
            ("sharded_onebit", lambda p: ShardedOneBitAdam(p, lr=LR, weight_decay=0.01,
                                                           codec="onebit", warmup_steps=40,
                                                           error_feedback=True,
                                                           communicator=comm)),
            ("sharded_onebit_gradient",
             lambda p: ShardedOneBitAdam(p, lr=LR, weight_decay=0.01, codec="onebit",
                                         warmup_steps=40, error_feedback=True,
                                         local_momentum=False, communicator=comm)),
            ("sharded_no_feedback",
             lambda p: ShardedOneBitAdam(p, lr=LR, weight_decay=0.01, codec="onebit",
                                         warmup_steps=40, error_feedback=False,
                                         communicator=comm))]
    for name, make in runs:
        model = wide()
        opt = make(model.parameters())
        for t in range(200):
            x, y = batch(torch, rank, t)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        results[name] = held_out(model)
        results[name + "_digest"] = digest(model)
    with open(os.path.join(args.work, f"result-{args.tag}-{rank}.json"), "w") as f:
        json.dump(results, f)


def worker(args):
    if args.compare:
        return compare(args)
    import torch
    import terse
    from terse.sharded_optim import ShardedOneBitAdam, combine
    torch.set_num_threads(1)
    comm = terse.comm.Communicator()
    rank, world = comm.rank, comm.size
    out = {"rank": rank, "world": world}
    model = net(torch)
    opt = ShardedOneBitAdam(model.parameters(), lr=LR, weight_decay=0.01, codec="onebit",
                            warmup_steps=WARMUP, error_feedback=True, communicator=comm)

    def loss_all(m, step, ranks):
        return sum(torch.nn.functional.mse_loss(m(x), y)
                   for x, y in (batch(torch, r, step) for r in range(ranks))) / ranks

    first = 0
    if args.load:
        sds = [torch.load(os.path.join(args.work, f"state-{r}.pt")) for r in range(args.load)]
        with torch.no_grad():
            for p, q in zip(model.parameters(), sds[0]["model"]):
                p.copy_(q)
        opt.load_state_dict(combine([sd["opt"] for sd in sds]))
        first = opt.steps
        assert opt.frozen_at == WARMUP, opt.frozen_at
    else:
        ref = net(torch)
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=LR, weight_decay=0.01)
    losses = []
    for t in range(first, first + (STEPS if not args.load else 10)):
        x, y = batch(torch, rank, t)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if not args.load and t < WARMUP:
            ref_opt.zero_grad()
            loss_all(ref, t, world).backward()   # the gradient averaged over the ranks
            ref_opt.step()
            if t == WARMUP - 1:
                out["warmup_max_diff"] = max((p - q).abs().max().item()
                                             for p, q in zip(model.parameters(),
                                                             ref.parameters()))
        with torch.no_grad():
            losses.append(loss_all(model, 10_000, world).item())   # a held-out batch per rank
    out.update(losses=losses, digest=digest(model), steps=opt.steps, frozen_at=opt.frozen_at,
               shard=list(opt.shard), state_bytes=opt.state_bytes,
               count=sum(p.numel() for p in model.parameters()))
    if not args.load:
        torch.save({"model": [p.detach().clone() for p in model.parameters()],
                    "opt": opt.state_dict()}, os.path.join(args.work, f"state-{rank}.pt"))
    with open(os.path.join(args.work, f"result-{args.tag}-{rank}.json"), "w") as f:
        json.dump(out, f)


def launch(args, world, tag, extra):
    store = tempfile.mkdtemp(dir=args.work, prefix=f"store-{tag}-")
    procs = []
    for r in range(world):
        env = dict(os.environ, TERSE_RANK=str(r), TERSE_WORLD_SIZE=str(world), TERSE_STORE=store,
                   TERSE_CPU_THREADS="1", OMP_NUM_THREADS="1", UCX_NET_DEVICES="lo",
                   TERSE_TIMEOUT_MS="120000")
        for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(v, None)
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker",
                                       "--work", args.work, "--tag", tag] + extra, env=env,
                                      start_new_session=True))
    bad = []
    for r, p in enumerate(procs):
        try:
            if p.wait(timeout=args.timeout) != 0:
                bad.append(f"rank {r} exited with {p.returncode}")
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"FAIL: the {tag} ranks did not finish within {args.timeout} s")
    if bad:
        sys.exit("FAIL: " + "; ".join(bad))
    results = []
    for r in range(world):
        with open(os.path.join(args.work, f"result-{tag}-{r}.json")) as f:
            results.append(json.load(f))
    return results


def drive(args):
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch is not importable by {sys.executable} ({e})")
        sys.exit(SKIP)
    os.makedirs(args.work, exist_ok=True)
    four = launch(args, 4, "four", [])
    d = max(r["warmup_max_diff"] for r in four)
    assert d < 1e-5, f"FAIL: the warm-up differs from torch AdamW by {d}"
    print(f"ok: {WARMUP} warm-up steps at 4 ranks equal torch AdamW on the averaged gradient "
          f"(max difference {d:.2e})")
    assert len({r["digest"] for r in four}) == 1, "FAIL: the 4 ranks' parameters differ"
    assert all(r["frozen_at"] == WARMUP and r["steps"] == STEPS for r in four)
    l = four[0]["losses"]
    assert l[-1] < 0.7 * l[WARMUP], f"FAIL: the compressed phase did not train: {l[WARMUP]} -> {l[-1]}"
    print(f"ok: onebit after the freeze, ranks bit-identical, held-out loss {l[0]:.4f} -> "
          f"{l[WARMUP]:.4f} (freeze) -> {l[-1]:.4f}")
    count = four[0]["count"]
    shards = sorted(tuple(r["shard"]) for r in four)
    assert sum(s[1] for s in shards) == count and shards[0][0] == 0
    full = 4 * (3 * count + (count + 3) // 4)   # OneBitAdam: m, v, worker and server residuals
    sb = four[0]["state_bytes"]
    print(f"ok: optimizer state on rank 0: {sb} bytes for {count} parameters "
          f"({sb / full:.3f}x OneBitAdam's {full})")
    two = launch(args, 2, "two", ["--load", "4"])
    assert len({r["digest"] for r in two}) == 1, "FAIL: the 2 resumed ranks' parameters differ"
    assert all(r["steps"] == STEPS + 10 for r in two)
    print(f"ok: 4-rank checkpoint resumed at 2 ranks, bit-identical, loss "
          f"{two[0]['losses'][0]:.4f} -> {two[0]['losses'][-1]:.4f}")
    cmp = launch(args, 4, "compare", ["--compare"])
    for key in ("adamw", "onebit_adam", "sharded", "sharded_onebit", "sharded_onebit_gradient",
                "sharded_no_feedback"):
        assert len({r[key + "_digest"] for r in cmp}) == 1, f"FAIL: {key}: ranks differ"
    c = cmp[0]
    rel = c["sharded"] / c["onebit_adam"] - 1
    broken = c["sharded_no_feedback"] / c["onebit_adam"] - 1
    print(f"held-out loss after 200 steps (5,380-parameter MLP, 4 non-IID ranks): AdamW "
          f"{c['adamw']:.5f}, OneBitAdam onebit {c['onebit_adam']:.5f}, ShardedOneBitAdam int8 "
          f"{c['sharded']:.5f} ({100 * rel:+.2f}%), ShardedOneBitAdam onebit + error feedback "
          f"{c['sharded_onebit']:.5g}, the same sending gradients {c['sharded_onebit_gradient']:.5g}, "
          f"onebit without error feedback "
          f"{c['sharded_no_feedback']:.5f} ({100 * broken:+.2f}%)")
    assert rel < 0.02, "FAIL: ShardedOneBitAdam int8 is more than 2% above OneBitAdam"
    rel1 = c["sharded_onebit"] / c["onebit_adam"] - 1
    assert rel1 < 0.02, (f"FAIL: ShardedOneBitAdam onebit + error feedback (local momentum) is "
                         f"{100 * rel1:+.2f}% against OneBitAdam")
    assert broken > 0.02, "FAIL: the bound does not catch broken compression"
    print("ok: within 2% of OneBitAdam; without error feedback it is not")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["drive", "worker"])
    ap.add_argument("--work", default=None)
    ap.add_argument("--tag", default="four")
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    if args.work is None:
        args.work = tempfile.mkdtemp(prefix="terse-sharded-adam-")
    (drive if args.mode == "drive" else worker)(args)


if __name__ == "__main__":
    main()
