"""What the torch tests share: the SKIP status and the check that torch is there, the check of a
raised exception's type and text, and the torchrun that drives a test's ranks. Every test script
of this directory imports it from beside itself (a script's own directory is on sys.path)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests

# What to do about a missing torch, for the SKIP lines.
DEBIAN_HINT = "; install Debian's python3-torch (scripts/install-deps.sh does)"
VENV_HINT = "; scripts/torch-env.sh sets up the torch the tests use"


def require_torch(hint="", gloo=False, terse_python=False):
    """Exits with SKIP unless torch imports (and, with gloo, has torch.distributed with gloo).
    terse_python puts terse's Python package (TERSE_PYTHON_DIR, else python/) first on the
    path."""
    try:
        import torch
        if gloo:
            import torch.distributed as dist
    except ImportError as e:
        print(f"SKIP: torch is not importable by {sys.executable} ({e}){hint}")
        sys.exit(SKIP)
    if gloo and (not dist.is_available() or not dist.is_gloo_available()):
        print(f"SKIP: this torch ({torch.__version__}) has no torch.distributed with gloo")
        sys.exit(SKIP)
    if terse_python:
        sys.path.insert(0, os.environ.get("TERSE_PYTHON_DIR", os.path.join(ROOT, "python")))


def expect_raises(kind, fn, *words):
    """Calls fn, which must raise `kind` with each of `words` in its text; returns the text."""
    try:
        fn()
    except kind as e:
        # With the class name: torch 1.13 wraps an exception raised in a comm hook in a
        # RuntimeError whose text names it ("TerseError: ..."), 2.x lets the TerseError through.
        text = f"{type(e).__name__}: {e}"
        for w in words:
            assert w in text, f"{kind.__name__} message lacks {w!r}: {text}"
        return text
    raise AssertionError(f"expected {kind.__name__} mentioning {words}")


def torchrun_env(extra_python_path=None):
    """The environment the ranks of a torchrun get: loopback UCX, one thread per rank (the
    machines running these tests are small), terse's Python package first, no TERSE_STORE."""
    env = dict(os.environ)
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.setdefault("TERSE_CPU_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = python_path()
    env.pop("TERSE_STORE", None)
    return env


def torchrun(script, world, port, log_dir, script_args, env, timeout):
    """torchrun of `world` ranks of `script` with script_args; exits with FAIL if they do."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
           "--master_addr", "127.0.0.1", "--master_port", str(port),
           "--redirects", "1", "--tee", "1", "--log_dir", log_dir,
           os.path.abspath(script)] + script_args
    print("+", " ".join(cmd), flush=True)
    try:
        done = subprocess.run(cmd, env=env, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: the ranks did not finish within {timeout} s")
    if done.returncode != 0:
        sys.exit(f"FAIL: torchrun exited with {done.returncode}")


def finish_worker(rank, path, results, **dump):
    """A worker's end: rank 0 writes `results` to `path` as JSON (json.dump's `dump` options),
    then every rank shuts terse and the process group down together."""
    import json

    import terse.ddp
    import torch.distributed as dist
    if rank == 0:
        with open(path, "w") as f:
            json.dump(results, f, **dump)
    dist.barrier()
    terse.ddp.shutdown()
    dist.destroy_process_group()


def noise_floor(args, runs, run_worker, table):
    """The noise-floor mode of a training task: run_worker(args, runs) over --seeds seeds on each
    of --isas, table(results) the summary; both go to <work>/noise.json."""
    import copy
    import json
    os.makedirs(args.work, exist_ok=True)
    results = []
    for isa in args.isas.split(","):
        for seed in range(args.seed, args.seed + args.seeds):
            one = copy.copy(args)
            one.isa, one.seed = isa, seed
            results.append(((isa, seed), run_worker(one, ",".join(runs))))
    summary = table(results)
    with open(os.path.join(args.work, "noise.json"), "w") as f:
        json.dump({"args": vars(args), "summary": summary,
                   "runs": [[isa, seed, res] for (isa, seed), res in results]}, f, indent=1)


def python_path():
    """PYTHONPATH with terse's Python package (python/) first."""
    return os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")])


def run_workers(script, mode, work, envs, timeout, *extra):
    """`script` <mode>-worker --work <work>/<mode>-rank<r>.json [extra] once per env of `envs`
    (rank r has envs[r]), through run_ranks; returns [(Popen, its results path)]."""
    outs = [os.path.join(work, f"{mode}-rank{r}.json") for r in range(len(envs))]
    ranks = [([sys.executable, os.path.abspath(script), f"{mode}-worker", "--work", out, *extra],
              env) for out, env in zip(outs, envs)]
    return list(zip(run_ranks(ranks, timeout), outs))


def run_ranks(ranks, timeout):
    """Starts a process per (argv, env) of `ranks` and waits for them all; at `timeout` seconds
    kills them all and exits with FAIL. Returns their Popen objects, finished."""
    import time
    procs = [subprocess.Popen(argv, env=env, start_new_session=True) for argv, env in ranks]
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"FAIL: the ranks did not finish within {timeout} s")
    return procs


class FakeBucket:
    """GradBucket's interface (PyTorch >= 1.10) for driving a DDP comm hook without DDP; no
    is_last(), so the hook takes index 0 as the iteration's last bucket, as for older torch."""

    def __init__(self, tensor, index, params):
        self._t, self._i, self._p = tensor, index, params

    def buffer(self):
        return self._t

    def index(self):
        return self._i

    def parameters(self):
        return self._p
