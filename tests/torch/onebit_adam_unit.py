#!/usr/bin/env python3
"""terse.optim.OneBitAdam in one process (a world of one): its warm-up is torch.optim.AdamW
(learning-rate scheduler included), its compressed phase with the lossless "none" codec is AdamW
with the variance frozen, a state_dict() round trip resumes bit for bit, and bad input is a
clear error; and the DDP hook's warmup_steps. SKIP (77) without torch. The multi-rank behaviour
is adam_task.py's.
"""
import io
import os
import sys

import _testlib
from _testlib import FakeBucket, expect_raises

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def main():
    _testlib.require_torch()
    import torch
    for v in ("TERSE_RANK", "TERSE_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        os.environ.pop(v, None)
    import terse
    import terse.optim

    torch.set_num_threads(1)

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))

    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(32, 12, generator=gen), torch.randn(32, 3, generator=gen))
            for _ in range(30)]

    def train(model, opt, steps, sched=None, first=0):
        for t in range(first, first + steps):
            x, y = data[t]
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if sched is not None:
                sched.step()

    def maxdiff(a, b):
        return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))

    def moved(a):
        return maxdiff(a, net())

    # 1. Warm-up = AdamW, with a scheduler changing the learning rate every 3 steps.
    a, b = net(), net()
    oa = terse.optim.OneBitAdam(a.parameters(), lr=1e-2, weight_decay=0.1, codec="onebit",
                                warmup_steps=100)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
    sa = torch.optim.lr_scheduler.StepLR(oa, 3, gamma=0.5)
    sb = torch.optim.lr_scheduler.StepLR(ob, 3, gamma=0.5)
    train(a, oa, 12, sa)
    train(b, ob, 12, sb)
    d = maxdiff(a, b)
    assert d < 1e-6 < moved(a), f"warm-up differs from AdamW by {d} (moved {moved(a)})"
    assert oa.steps == 12 and not oa.frozen
    print(f"ok: 12 warm-up steps with StepLR equal torch AdamW (max difference {d:.2e})")

    # 2. Compressed phase with "none" = AdamW with the variance frozen after the warm-up.
    a, b = net(), net()
    oa = terse.optim.OneBitAdam(a.parameters(), lr=1e-2, weight_decay=0.1, codec="none",
                                warmup_steps=5)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
    train(a, oa, 20)
    train(b, ob, 5)
    frozen = {p: ob.state[p]["exp_avg_sq"].clone() for p in b.parameters()}
    c2 = 1 - 0.999 ** 5
    for t in range(5, 20):
        x, y = data[t]
        b.zero_grad()
        torch.nn.functional.mse_loss(b(x), y).backward()
        c1 = 1 - 0.9 ** (t + 1)
        with torch.no_grad():
            for p in b.parameters():
                m = ob.state[p]["exp_avg"]
                p.mul_(1 - 1e-2 * 0.1)
                m.mul_(0.9).add_(p.grad, alpha=0.1)
                p.addcdiv_(m, frozen[p].sqrt() / c2 ** 0.5 + 1e-8, value=-1e-2 / c1)
    d = maxdiff(a, b)
    assert oa.frozen_at == 5 and oa.steps == 20
    assert d < 1e-5, f"compressed phase with none differs from frozen-variance AdamW by {d}"
    unfrozen = net()
    ou = torch.optim.AdamW(unfrozen.parameters(), lr=1e-2, weight_decay=0.1)
    train(unfrozen, ou, 20)
    assert maxdiff(a, unfrozen) > 100 * max(d, 1e-7), "frozen and live variance agree: no test"
    print(f"ok: after 5 warm-up steps, 'none' equals AdamW with frozen variance (diff {d:.2e})")

    # 3. state_dict round trip (through torch.save) resumes bit for bit, in the compressed phase.
    a, c = net(), net()
    oa = terse.optim.OneBitAdam(a.parameters(), lr=1e-2, codec="onebit", warmup_steps=4)
    train(a, oa, 20)
    oc = terse.optim.OneBitAdam(c.parameters(), lr=1e-2, codec="onebit", warmup_steps=4)
    train(c, oc, 10)
    buf = io.BytesIO()
    torch.save({"model": c.state_dict(), "opt": oc.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf)
    assert saved["opt"]["terse"]["steps"] == 10 and saved["opt"]["terse"]["frozen_at"] == 4
    r = net()
    r.load_state_dict(saved["model"])
    orr = terse.optim.OneBitAdam(r.parameters(), lr=1e-2, codec="onebit", warmup_steps=4)
    orr.load_state_dict(saved["opt"])
    assert orr.steps == 10 and orr.frozen
    train(r, orr, 10, first=10)
    assert maxdiff(a, r) == 0.0, "resumed run differs from the uninterrupted one"
    r2 = net()
    r2.load_state_dict(saved["model"])
    or2 = terse.optim.OneBitAdam(r2.parameters(), lr=1e-2, codec="onebit", warmup_steps=4)
    or2.load_state_dict(saved["opt"], reset_residuals=True)
    train(r2, or2, 10, first=10)
    assert maxdiff(a, r2) > 0.0, "reset_residuals=True changed nothing"
    print("ok: state_dict through torch.save resumes the compressed phase bit for bit; "
          "reset_residuals=True drops the residuals")

    # 3b. The parameters are views of the optimizer's flat buffer; replacing one's storage
    #     (p.data = ...) or loading a model state_dict afterwards still trains the values the
    #     model holds.
    a, b = net(), net()
    oa = terse.optim.OneBitAdam(a.parameters(), lr=1e-2, codec="onebit", warmup_steps=3)
    train(a, oa, 4)
    b.load_state_dict(a.state_dict())       # b: the same values, its own optimizer from here
    ob = terse.optim.OneBitAdam(b.parameters(), lr=1e-2, codec="onebit", warmup_steps=3)
    ob.load_state_dict(oa.state_dict())
    with torch.no_grad():
        a[0].weight.data = a[0].weight.data.clone()   # a's storage replaced behind oa's back
    train(a, oa, 6, first=4)
    train(b, ob, 6, first=4)
    assert maxdiff(a, b) == 0.0, "a replaced parameter storage was not taken back"
    c = net()
    oc = terse.optim.OneBitAdam(c.parameters(), lr=1e-2, codec="onebit", warmup_steps=3)
    c.load_state_dict(a.state_dict())       # copies into the flat buffer's views
    assert maxdiff(c, a) == 0.0
    print("ok: parameters alias the flat buffer; replaced storage and loaded values are used")

    # 4. Bad input.
    m = net()
    expect_raises(ValueError, lambda: terse.optim.OneBitAdam(
        [{"params": [m[0].weight]}, {"params": [m[2].weight]}]), "one parameter group")
    expect_raises(ValueError, lambda: terse.optim.OneBitAdam([torch.zeros(3, dtype=torch.float64,
                                                                   requires_grad=True)]),
           "float32 CPU")
    expect_raises(terse.TerseError, lambda: terse.optim.OneBitAdam(m.parameters(), codec="nope"), "nope")
    expect_raises(terse.TerseError, lambda: terse.optim.OneBitAdam(m.parameters(), betas=(1.5, 0.9)),
           "betas")
    expect_raises(ValueError, lambda: terse.optim.OneBitAdam(
        m[0].parameters()).load_state_dict(saved["opt"]), "elements")
    damaged = dict(saved["opt"])
    damaged["terse"] = dict(damaged["terse"])
    blob = damaged["terse"]["state"].clone()
    blob[100] ^= 1
    damaged["terse"]["state"] = blob
    expect_raises(terse.TerseError, lambda: terse.optim.OneBitAdam(
        net().parameters()).load_state_dict(damaged), "checksum")
    expect_raises(ValueError, lambda: terse.optim.OneBitAdam(net().parameters()).load_state_dict(
        {"state": {}, "param_groups": []}), "not a OneBitAdam")
    print("ok: bad groups, dtypes, codecs, betas and checkpoints are clear errors")

    # 4b. close() frees the C state once (issue 46, item 6): a later step, steps or checkpoint
    #     is a clear ValueError, a second close() nothing; the same for ShardedOneBitAdam.
    import gc
    import terse.sharded_optim
    for make in (lambda ps: terse.optim.OneBitAdam(ps, codec="onebit", warmup_steps=2),
                 lambda ps: terse.sharded_optim.ShardedOneBitAdam(ps, warmup_steps=2)):
        m = net()
        o = make(m.parameters())
        train(m, o, 3)
        assert o.steps == 3 and o.frozen_at == 2
        o.close()
        o.close()
        expect_raises(ValueError, lambda: train(m, o, 1, first=3), "closed")
        expect_raises(ValueError, lambda: o.steps, "closed")
        expect_raises(ValueError, lambda: o.state_dict(), "closed")
        del o
        gc.collect()
    # The option structs carry this package's own size, which the library checks against its
    # layout (before, ..._options_default wrote the library's size over it, so a copy that
    # differs from the header was never noticed, and the library wrote its whole struct into it).
    import ctypes
    from terse import _optim_base

    class Longer(_optim_base.OneBitAdamOptions):
        _fields_ = [("added", ctypes.c_int64)]
    opts = _optim_base.options(Longer, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                               codec=b"none", warmup_steps=2, variance_check_interval=20,
                               variance_tolerance=0.1, min_warmup_steps=40,
                               max_warmup_steps=2000, average_gradients=1, added=0)
    expect_raises(terse.TerseError, lambda: _optim_base.OneBitAdamCore.create(10, opts), "struct_size")
    print("ok: close() frees an optimizer's C state once, later use is a clear error; the option "
          "structs' size is checked by the library")

    # 5. The DDP hook's warm-up (terse.ddp.TerseState(warmup_steps=N)): the first N iterations
    #    reduce uncompressed (a world of one returns the gradient exactly, no residuals made);
    #    from iteration N+1 on the codec runs (onebit changes the values, residuals exist).
    import terse.ddp

    class Bucket(FakeBucket):
        """With torch >= 2.0's is_last()."""

        def __init__(self, tensor, index, last):
            super().__init__(tensor, index, [])
            self.last = last

        def is_last(self):
            return self.last

    state = terse.ddp.TerseState("onebit", warmup_steps=2, overlap=False)
    g = torch.linspace(-1, 2, 5000)
    for it in range(4):
        outs = []
        for index in (1, 0):   # DDP's order: the last bucket has index 0
            got = terse.ddp.terse_hook(state, Bucket(g.clone(), index, index == 0)).wait()
            outs.append(torch.equal(got, g))
        warm = it < 2
        assert all(outs) == warm and any(outs) == warm, f"iteration {it}: exact={outs}"
        assert state.iteration == it + 1
    assert state.created == 2, f"{state.created} feedback objects, expected 2 (after warm-up)"
    sd = state.state_dict()
    assert sd["iteration"] == 4
    again = terse.ddp.TerseState("onebit", warmup_steps=10)
    again.load_state_dict(sd)
    assert again.iteration == 4
    expect_raises(ValueError, lambda: terse.ddp.TerseState("onebit", warmup_steps=-1), "warmup_steps")
    print("ok: the DDP hook's warmup_steps reduce uncompressed first, then with the codec; the "
          "iteration is checkpointed")


if __name__ == "__main__":
    main()
