"""What every rank of terse's optimizers must pass alike, checked across the ranks (issue #35 for
OneBitAdam, #44 for the sharded ones and for parameters without gradients).

The C cores see one flat buffer of floats: a parameter list in another order on one rank, or a
parameter with a gradient on one rank and none on another, would be averaged position by position
with other ranks' values and nothing would notice. These checks are small allreduces of exact
small integers, so every rank sees every rank's contribution and all reach the same verdict.
"""
import hashlib

import torch

__all__ = ["refuse", "agree", "agree_gradients", "take_gradients"]


def _words(text):
    """A 64-bit hash of text as 4 integers below 2^16: exact in float32, and a sum with zeros
    (the other ranks' slots) leaves them exact."""
    digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    return [(digest >> (16 * k)) & 0xFFFF for k in range(4)]


def refuse(comm, error):
    """This rank refused its own arguments before a collective the other ranks are already in
    (or about to enter): it takes that collective's place (terse_comm_reject), so they fail at
    once naming this rank instead of waiting for TERSE_TIMEOUT_MS. Returns without raising; the
    caller raises its own error."""
    try:
        if comm is not None and comm.size > 1:
            comm._in_order(comm._refused(error))
    except Exception:  # noqa: BLE001 -- the refusal itself, raised back by _refused
        pass


def agree(comm, who, tensors, options=None):
    """One allreduce at construction: every rank's parameter layout (shape and dtype of each
    tensor the core will see, in order; or (shape, dtype[, where]) tuples) and, when given, its
    ``options`` text. Raises
    ValueError on every rank, naming the ranks that differ from rank 0, when they are not the
    same everywhere. ``who`` names the optimizer in the message."""
    if comm.size == 1:
        return
    entries = [(tuple(t.shape), str(t.dtype)) if isinstance(t, torch.Tensor)
               else (tuple(t[0]),) + tuple(str(x) for x in t[1:]) for t in tensors]
    layout = repr(entries)
    words = _words(layout) + (_words(options) if options is not None else [0, 0, 0, 0])
    k = len(words)
    table = torch.zeros(comm.size * k, dtype=torch.float32)
    table[comm.rank * k:(comm.rank + 1) * k] = torch.tensor(words, dtype=torch.float32)
    comm.allreduce(table, "none", "sum")
    rows = [table[r * k:(r + 1) * k].tolist() for r in range(comm.size)]
    shapes = [r for r in range(1, comm.size) if rows[r][:4] != rows[0][:4]]
    differ = [r for r in range(1, comm.size) if rows[r][4:] != rows[0][4:]]
    if shapes:
        mine = ", ".join(str(e[0]) for e in entries[:8])
        more = ", ..." if len(tensors) > 8 else ""
        raise ValueError(
            f"terse: {who}'s parameters differ between ranks: rank(s) "
            f"{', '.join(map(str, shapes))} passed other shapes or dtypes, or the same in another "
            f"order, than rank 0; every rank must pass the same parameters in the same order (its "
            f"state is averaged position by position). Rank {comm.rank} passed {len(tensors)} "
            f"tensors that take gradients: {mine}{more}")
    if differ:
        raise ValueError(
            f"terse: {who}'s options differ between ranks: rank(s) "
            f"{', '.join(map(str, differ))} passed other {options_what(who)} than rank 0; every "
            f"rank must pass the same")


def options_what(who):
    if who == "OneBitAdam":
        return "codec, betas, eps, weight_decay or warm-up settings"
    return "betas, eps, weight_decay or error_feedback"


def agree_gradients(comm, who, has_grad, labels):
    """Each step: which parameters have a gradient (``has_grad``, one bool per parameter the
    core sees; ``labels`` names each in messages). A parameter without one on every rank is
    left untouched by the step; one with a gradient on some ranks only would be averaged with
    the others' zeros, so that raises ValueError on every rank, naming it. Returns nothing; one small allreduce when the world has
    more than one rank."""
    if comm.size == 1:
        return
    table = torch.tensor([1.0 if h else 0.0 for h in has_grad], dtype=torch.float32)
    comm.allreduce(table, "none", "sum")
    counts = [int(c) for c in table.tolist()]
    split = [i for i, c in enumerate(counts) if 0 < c < comm.size]
    if split:
        named = ", ".join(f"{labels[i]} on {counts[i]} of {comm.size} ranks (this "
                          f"rank: {'a gradient' if has_grad[i] else 'none'})" for i in split[:4])
        more = f" and {len(split) - 4} more" if len(split) > 4 else ""
        raise ValueError(
            f"terse: {who}: parameter(s) {named}{more} have a gradient on some ranks and none "
            f"on others this step; every rank must leave the same parameters without a gradient "
            f"(DDP's find_unused_parameters=True gives the unused ones zeros on every rank, or "
            f"set p.grad = torch.zeros_like(p) where a rank did not use p)")


def take_gradients(comm, who, group, index, flat_g):
    """Copies the gradients of the parameters the core sees (``group[i]`` for i in ``index``)
    into ``flat_g`` and returns those that have none on every rank (zeros in ``flat_g``; the
    caller leaves them as they were). Raises ValueError, on every rank, for a parameter that
    has a gradient on some ranks only, and for one that took no gradient when the optimizer
    was made but has one now (the core has no state for it)."""
    seen = set(index)
    late = [i for i, p in enumerate(group) if i not in seen and p.grad is not None]
    if late:
        error = ValueError(
            f"terse: {who}: parameter(s) {late[:8]} had requires_grad=False when the optimizer "
            f"was made and have a gradient now; its state covers the parameters that took "
            f"gradients then: make a new optimizer after unfreezing parameters")
        refuse(comm, error)   # the other ranks are about to agree on the gradients with us
        raise error
    params = [group[i] for i in index]
    agree_gradients(comm, who, [p.grad is not None for p in params],
                    [f"{i} {tuple(group[i].shape)}" for i in index])
    missing, at = [], 0
    for p in params:
        n = p.numel()
        if p.grad is None:
            flat_g[at:at + n].zero_()
            missing.append(p)
        else:
            flat_g[at:at + n].copy_(p.grad.reshape(-1))
        at += n
    return missing
