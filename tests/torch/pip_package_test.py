#!/usr/bin/env python3
"""The terse package pip installed into this interpreter (python/pyproject.toml; CI's torch
environment gets it from scripts/torch-env.sh --install-terse) loads the libterse.so it carries:
imported from outside the checkout, with TERSE_LIBRARY and PYTHONPATH unset, library_path() must
lie inside the installed package, and an allreduce in a world of one must work. Exits 77 (SKIP)
when terse is not pip-installed here, naming the command that installs it."""
import argparse
import os
import subprocess
import sys

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import os, sys
import terse
package = os.path.dirname(os.path.abspath(terse.__file__))
if package.startswith(sys.argv[1] + os.sep):
    sys.exit(f"FAIL: terse was imported from the checkout ({package}), not the installed package")
path = os.path.realpath(terse.library_path())
if not path.startswith(os.path.realpath(package) + os.sep):
    sys.exit(f"FAIL: the installed terse at {package} loaded {path}, not its own libterse.so")
import torch
os.environ.update(TERSE_RANK="0", TERSE_WORLD_SIZE="1")
with terse.Communicator() as comm:
    t = torch.arange(8, dtype=torch.float32)
    comm.allreduce(t, codec="int8")
    if not torch.allclose(t, torch.arange(8, dtype=torch.float32), atol=0.05):
        sys.exit(f"FAIL: allreduce in a world of one changed the values: {t}")
print(f"OK: terse {terse.version()} from {package} loaded {path}")
"""


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TERSE_LIBRARY", "PYTHONPATH", "LD_LIBRARY_PATH")}
    env["UCX_NET_DEVICES"] = "lo"
    probe = subprocess.run([sys.executable, "-c", "import terse"], cwd=args.work, env=env,
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: terse is not pip-installed for {sys.executable} ({probe.stderr.strip()[-200:]}); "
              f"install it with: {sys.executable} -m pip install {ROOT}/python")
        sys.exit(SKIP)
    done = subprocess.run([sys.executable, "-c", CHILD, ROOT], cwd=args.work, env=env,
                          timeout=120)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
