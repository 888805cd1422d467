#!/usr/bin/env python3
"""terse.fsdp's residuals at another world size, in one process (no ranks needed):

1. terse.fsdp's idea of FSDP2's reduce-scatter layout is FSDP2's own: for parameters of several
   shapes (dim 0 dividing the world size or not, 1-D, 3-D) and world sizes 1-5, params_to_rs of
   the parameters' values equals what FSDP2's foreach_reduce_scatter_copy_in writes, and
   rs_to_params takes it back.
2. A checkpoint saved by 4 ranks loads on 2 and on 3: each unit's worker residual becomes the
   old ranks' mean in the parameters' layout, laid out for the new world size (checked against
   FSDP2's copy-in of that mean); the same world size still loads a rank's own state exactly;
   one rank's state at another world size, or a unit whose parameters changed, starts fresh
   with a warning.

SKIP (77) without a torch that has FSDP2's custom comms (2.8 or later).
"""
import os
import sys
import warnings

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

FAILS = []


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print(f"FAIL: {what}", flush=True)


def main():
    try:
        import torch
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
            foreach_reduce_scatter_copy_in)
        import terse.fsdp as tf
    except ImportError as e:
        print(f"SKIP: no torch with FSDP2's custom comms for {sys.executable} ({e})")
        sys.exit(SKIP)
    from terse.comm import Feedback

    shapes = [(10, 3), (7,), (4, 2, 3), (1, 5), (12,)]

    def values_of(seed):
        gen = torch.Generator().manual_seed(seed)
        return [torch.randn(s, generator=gen) for s in shapes]

    def fsdp_layout(tensors, world):
        """What FSDP2 hands the reduce-scatter comm for these gradients on `world` ranks."""
        padded = sum(-(-t.shape[0] // world) * world * (t.numel() // t.shape[0]) for t in tensors)
        out = torch.full((padded,), float("nan"))
        foreach_reduce_scatter_copy_in([t.clone() for t in tensors], out, world)
        return out

    # 1. The layout.
    for world in range(1, 6):
        tensors = values_of(world)
        flat = torch.cat([t.reshape(-1) for t in tensors])
        theirs = fsdp_layout(tensors, world)
        ours = tf.params_to_rs(flat, shapes, world)
        check(ours.numel() == theirs.numel(), f"world {world}: {ours.numel()} elements, FSDP2 "
              f"lays out {theirs.numel()}")
        if ours.numel() == theirs.numel():
            # FSDP2's padding is whatever its copy-in writes there (zeros); compare all of it.
            check(torch.equal(ours, theirs), f"world {world}: params_to_rs differs from FSDP2's "
                  f"reduce-scatter input")
        check(torch.equal(tf.rs_to_params(theirs, shapes, world), flat),
              f"world {world}: rs_to_params does not take FSDP2's layout back")
    try:
        tf.rs_to_params(torch.zeros(5), shapes, 2)
        check(False, "a tensor of the wrong length was taken for the layout")
    except ValueError:
        pass

    # 2. Checkpoints across world sizes, with stand-ins for the communicator (a rank and a
    # size is all the state code reads) and one unit whose residual has every element distinct.
    class Comm:
        def __init__(self, rank, size):
            self.rank, self.size = rank, size

    codec = "onebit"

    def unit_state(rank, world, fill=None):
        rs = tf.TerseReduceScatter(Comm(rank, world), codec, name="layer", shapes=shapes)
        state = tf.TerseFSDP(Comm(rank, world), [("layer", rs, None)])
        if fill is not None:
            count = tf.params_to_rs(torch.zeros(sum(t.numel() for t in values_of(0))), shapes,
                                    world).numel()
            rs.feedback = Feedback(codec, count)
            torch.frombuffer(rs.feedback.worker(), dtype=torch.float32).copy_(fill)
        return state, rs

    old_world = 4
    saved, logical = [], []
    for r in range(old_world):
        values = torch.cat([t.reshape(-1) for t in values_of(100 + r)])
        logical.append(values)
        state, _ = unit_state(r, old_world, tf.params_to_rs(values, shapes, old_world))
        saved.append(state.state_dict())
    mean = sum(logical) / old_world
    for new_world in (2, 3):
        for rank in range(new_world):
            state, rs = unit_state(rank, new_world)
            state.load_state_dict(saved)
            got = torch.frombuffer(rs.feedback.worker(), dtype=torch.float32).clone()
            split, at = [], 0
            for s in shapes:
                n = 1
                for d in s:
                    n *= d
                split.append(mean[at:at + n].view(s))
                at += n
            want = fsdp_layout(split, new_world)
            check(torch.allclose(got, want, rtol=0, atol=1e-6),
                  f"4 -> {new_world} ranks, rank {rank}: the residual is not the old ranks' mean "
                  f"in FSDP2's layout (max diff {(got - want).abs().max().item():.3g})")
    # The same world size: a rank's own state, exactly.
    state, rs = unit_state(2, old_world)
    state.load_state_dict(saved)
    got = torch.frombuffer(rs.feedback.worker(), dtype=torch.float32)
    check(torch.equal(got, tf.params_to_rs(logical[2], shapes, old_world)),
          "the same world size did not load the rank's own residual")
    # One rank's state at another world size: dropped with a warning.
    state, rs = unit_state(0, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state.load_state_dict(saved[0])
    check(rs.feedback is None and any("every old rank" in str(w.message) for w in caught),
          "one rank's state at another world size was not dropped with a warning")
    # A unit whose parameters changed: fresh, with a warning.
    state, rs = unit_state(0, 2)
    rs.shapes = shapes[:-1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state.load_state_dict(saved)
    check(rs.feedback is None and any("layout" in str(w.message) for w in caught),
          "a unit whose parameters changed kept residuals")
    if FAILS:
        print(f"{len(FAILS)} failed")
        sys.exit(1)
    print("fsdp_unit: every check passed")


if __name__ == "__main__":
    main()
