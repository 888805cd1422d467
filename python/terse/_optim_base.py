"""What terse's optimizers share (terse.optim.OneBitAdam, terse.sharded_optim.ShardedOneBitAdam
and FSDPShardedOneBitAdam): the C objects they drive, as handles, and their torch base class.

A handle (``Core``, a ``_lib.Handle``) is made by a C constructor (``create``, or a checkpoint's
``deserialize``) and frees its object exactly once: at ``close()``, or when it is collected
(after a failed ``__init__`` and at interpreter shutdown too); a closed one raises ValueError
instead of passing NULL to C. The optimizers hold one (one per FSDP unit for
FSDPShardedOneBitAdam), so they need no ``__del__`` of their own.
"""
import ctypes

import torch

from . import _agree, _lib
from ._default_comm import default_communicator
from ._lib import check

__all__ = ["OneBitAdamOptions", "ShardedOneBitAdamOptions", "OneBitAdamCore", "ShardedCore",
           "CoreOptimizer", "FlatOptimizer"]


class OneBitAdamOptions(ctypes.Structure):
    """terse_onebit_adam_options_t (include/terse/terse.h)."""
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("codec", ctypes.c_char_p),
                ("warmup_steps", ctypes.c_int64),
                ("variance_check_interval", ctypes.c_int64),
                ("variance_tolerance", ctypes.c_float),
                ("min_warmup_steps", ctypes.c_int64),
                ("max_warmup_steps", ctypes.c_int64),
                ("average_gradients", ctypes.c_int)]


class ShardedOneBitAdamOptions(ctypes.Structure):
    """terse_sharded_onebit_adam_options_t (include/terse/terse.h)."""
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("codec", ctypes.c_char_p),
                ("warmup_steps", ctypes.c_int64),
                ("error_feedback", ctypes.c_int),
                ("param_codec", ctypes.c_char_p),
                ("local_momentum", ctypes.c_int)]


def options(struct, **fields):
    """An options struct with every field set and struct_size this copy's own size, so the
    library checks this layout against its own. (The C ..._options_default would write the
    library's struct, of the library's size, into this copy, and set the size it checks.)"""
    unset = [name for name, _ in struct._fields_ if name != "struct_size" and name not in fields]
    if unset:
        raise TypeError(f"terse: {struct.__name__} without {', '.join(unset)}")
    return struct(struct_size=ctypes.sizeof(struct), **fields)


class Core(_lib.Handle):
    """One C optimizer object: the terse_<kind>_* functions on its handle."""

    _prefix = ""   # terse_<kind>

    def __init__(self, constructor, *args):
        """The object constructor(*args, &object) makes (a _create or a _deserialize)."""
        self._create(constructor, *args)

    @classmethod
    def _api(cls):
        """The library, or ImportError when it lacks this kind's functions (an older build)."""
        names = [name for name, _, _ in _lib._NEWER_SIGNATURES
                 if name.startswith(cls._prefix + "_")]
        return _lib.require(names, f"terse's {cls._prefix[len('terse_'):]}")

    def _fn(self, name):
        return getattr(_lib.lib(), f"{self._prefix}_{name}")

    @property
    def steps(self):
        """Steps taken so far."""
        return int(self._fn("steps")(self._h()))

    @property
    def frozen_at(self):
        """The step after which the variance froze; 0 while warming up."""
        return int(self._fn("frozen_at")(self._h()))

    def to_bytes(self):
        """The object's checkpoint form (docs/optim.md)."""
        return _lib.serialized(self._fn("serialize"), self._h())

    def run(self, comm, name, *args):
        """terse_<kind>_<name>(object, communicator, *args), a collective step: run as the
        communicator runs its blocking calls (behind its queued ones, under its lock)."""
        fn = self._fn(name)
        comm._locked(lambda comm_handle: fn(self._h(), comm_handle, *args))


class OneBitAdamCore(Core):
    """terse_onebit_adam_t."""

    _prefix = "terse_onebit_adam"
    _destroy = "terse_onebit_adam_destroy"
    _what = "this OneBitAdam"

    @classmethod
    def create(cls, count, opts):
        return cls(cls._api().terse_onebit_adam_create, count, ctypes.byref(opts))

    @classmethod
    def from_bytes(cls, data):
        return cls(cls._api().terse_onebit_adam_deserialize, data, len(data))

    def reset_residuals(self):
        self._fn("reset_residuals")(self._h())


class ShardedCore(Core):
    """terse_sharded_onebit_adam_t: rank `rank`'s shard of `count` elements over `world` ranks."""

    _prefix = "terse_sharded_onebit_adam"
    _destroy = "terse_sharded_onebit_adam_destroy"
    _what = "this ShardedOneBitAdam's state"

    @classmethod
    def create(cls, count, world, rank, opts):
        return cls(cls._api().terse_sharded_onebit_adam_create, count, world, rank,
                   ctypes.byref(opts))

    @classmethod
    def from_parts(cls, blobs, world, rank, source=None):
        """Rank `rank` of `world` from every saving rank's to_bytes(); `source` (a contiguous
        int64 tensor, one entry per new element: the saved element it comes from, -1 for new
        padding) where the element order depends on the world size (FSDP2's layout)."""
        l = cls._api()
        keep = [ctypes.create_string_buffer(b, len(b)) for b in blobs]
        parts = (ctypes.c_void_p * len(keep))(*[ctypes.cast(k, ctypes.c_void_p) for k in keep])
        sizes = (ctypes.c_size_t * len(keep))(*[len(b) for b in blobs])
        if source is None:
            return cls(l.terse_sharded_onebit_adam_deserialize, parts, sizes, len(keep), world,
                       rank)
        return cls(l.terse_sharded_onebit_adam_deserialize_remapped, parts, sizes, len(keep),
                   world, rank, source.numel(),
                   ctypes.cast(source.data_ptr(), ctypes.POINTER(ctypes.c_int64)))

    @property
    def shard(self):
        """(offset, length) of this rank's part of the elements."""
        off, length = ctypes.c_size_t(0), ctypes.c_size_t(0)
        check(self._fn("shard")(self._h(), ctypes.byref(off), ctypes.byref(length)))
        return off.value, length.value

    @property
    def state_bytes(self):
        """Bytes of optimizer state on this rank (moments, scales, residuals, buddy copy)."""
        return int(self._fn("state_bytes")(self._h()))

    @property
    def buddy_bytes(self):
        """Of state_bytes: the copy of the buddy rank's shard state (0 when off)."""
        return int(self._fn("buddy_bytes")(self._h()))

    def set_buddy_copy(self, on):
        check(self._fn("set_buddy_copy")(self._h(), 1 if on else 0))

    def shrink(self, comm, lost_blobs=()):
        """Continues on the shrunk communicator `comm` (collective over it): the dead ranks'
        shards from the buddy copies, or else from `lost_blobs` (their to_bytes() of the last
        checkpoint)."""
        keep = [ctypes.create_string_buffer(b, len(b)) for b in lost_blobs]
        parts = (ctypes.c_void_p * max(1, len(keep)))(
            *[ctypes.cast(k, ctypes.c_void_p) for k in keep])
        sizes = (ctypes.c_size_t * max(1, len(keep)))(*[len(b) for b in lost_blobs])
        self.run(comm, "shrink", parts, sizes, len(keep))

    def shrink_parts(self, comm, lost_blobs=()):
        """shrink()'s gathering alone (collective over `comm`; this core is left as it is): every
        old rank's to_bytes() as of now, by old rank, and by old rank the parameter shard (a
        float32 tensor) a dead rank's buddy copy kept, else None."""
        keep = [ctypes.create_string_buffer(b, len(b)) for b in lost_blobs]
        parts = (ctypes.c_void_p * max(1, len(keep)))(
            *[ctypes.cast(k, ctypes.c_void_p) for k in keep])
        sizes = (ctypes.c_size_t * max(1, len(keep)))(*[len(b) for b in lost_blobs])
        self.run(comm, "shrink_parts", parts, sizes, len(keep))
        data = _lib.serialized(self._fn("shrunk_parts"), self._h())

        def u64(at):
            return int.from_bytes(data[at:at + 8], "little")
        world, at = u64(0), 8
        blobs, params = [], []
        for _ in range(world):
            n = u64(at)
            blobs.append(data[at + 8:at + 8 + n])
            at += 8 + n
            n = u64(at)
            shard = torch.frombuffer(bytearray(data[at + 8:at + 8 + 4 * n]), dtype=torch.float32) \
                if n else None
            params.append(shard)
            at += 8 + 4 * n
        return blobs, params


class CoreOptimizer(torch.optim.Optimizer):
    """A torch optimizer whose state is C objects (``_cores()``): the communicator (the process's
    shared one unless one is given), the checks every constructor makes first, ``steps``,
    ``frozen_at`` and ``close()``."""

    _who = ""   # the class's name in messages

    def _cores(self):
        """The C objects this optimizer steps."""
        raise NotImplementedError

    @property
    def communicator(self):
        if getattr(self, "_comm", None) is None:
            self._comm = default_communicator()   # one per process, shared with terse.ddp
        return self._comm

    def _refuse(self, error):
        """This rank refused its own arguments: the other ranks are in (or about to enter) the
        constructor's agreement, and fail it at once naming this rank instead of waiting for
        TERSE_TIMEOUT_MS (_agree.refuse)."""
        try:
            comm = self.communicator
        except Exception:  # noqa: BLE001 -- no communicator at all: nobody waits
            return
        _agree.refuse(comm, error)

    def _init_group(self, params, lr, betas, eps, weight_decay):
        """torch's Optimizer over params with AdamW's settings, refused unless lr is a number
        >= 0 and the params make one group (the cores' state covers them all at once)."""
        if not isinstance(lr, (int, float)) or lr < 0:
            raise ValueError(f"terse: lr must be a number >= 0, not {lr!r}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))
        if len(self.param_groups) != 1:
            raise ValueError(f"terse: {self._who} takes one parameter group (one state over all "
                             f"its parameters); give every parameter the same options")

    @staticmethod
    def _closure_loss(closure):
        """What step(closure) returns: closure() run with gradients enabled (the step itself
        runs without), as torch's optimizers do; None without a closure."""
        if closure is None:
            return None
        with torch.enable_grad():
            return closure()

    @property
    def steps(self):
        """Steps taken so far."""
        return max(core.steps for core in self._cores())

    @property
    def frozen_at(self):
        """The step after which the variance froze; 0 while warming up."""
        return self._cores()[0].frozen_at

    @property
    def frozen(self):
        """True once the variance is frozen: from then on each step compresses."""
        return self.frozen_at > 0

    def close(self):
        """Frees the C state now rather than when the optimizer is collected; a later step,
        checkpoint or ``steps`` raises ValueError. A second close does nothing."""
        for core in self._cores():
            core.close()


class FlatOptimizer(CoreOptimizer):
    """An optimizer whose one core steps all parameters in one flat float32 buffer, which the
    parameters become views of (OneBitAdam, ShardedOneBitAdam): ``_core``, the parameters it
    sees and the step."""

    def _cores(self):
        core = getattr(self, "_core", None)
        return [core] if core is not None else []

    def _init_flat(self, params, lr, betas, eps, weight_decay):
        """_init_group, then the parameters the core sees: those that take gradients
        (requires_grad when the optimizer is made; the others are never touched, as torch's
        AdamW), as ``_index`` (their places in the group), ``_params`` and ``count``."""
        self._init_group(params, lr, betas, eps, weight_decay)
        group = self.param_groups[0]["params"]
        self._index = [i for i, p in enumerate(group) if p.requires_grad]
        self._params = [group[i] for i in self._index]
        self.count = sum(p.numel() for p in self._params)

    def _alias_params(self):
        """Makes every parameter's data a view of the flat buffer the C core updates in place,
        so a step copies no parameters (two full copies per step otherwise, as much time as
        the update itself for a large model). The Parameter objects stay the same, so DDP, the
        model and state_dict() see nothing change."""
        at = 0
        with torch.no_grad():
            for p in self._params:
                n = p.numel()
                view = self._flat_p[at:at + n].view_as(p)
                view.copy_(p)
                p.data = view
                at += n
        self._aliased = [p.data_ptr() for p in self._params]

    def _params_aliased(self):
        return all(p.data_ptr() == ptr for p, ptr in zip(self._params, self._aliased))

    def _before_core_step(self, missing):
        """Called once the gradients are in the flat buffer, before the core's step; `missing`
        are the parameters without a gradient on every rank."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        if not self._params_aliased():
            # Someone replaced a parameter's storage (p.data = ...): take it back into the flat
            # buffer, values included.
            self._alias_params()
        core = self._core
        comm = self.communicator
        try:
            core._h()
        except ValueError as error:   # closed: the other ranks fail the agreement below at once
            self._refuse(error)
            raise
        missing = _agree.take_gradients(comm, self._who, self.param_groups[0]["params"],
                                        self._index, self._flat_g)
        if len(missing) == len(self._params):
            return loss   # no gradient anywhere: as torch's AdamW, nothing moves, no step counts
        self._before_core_step(missing)
        # A parameter without a gradient (on every rank: take_gradients agreed) goes through the
        # core with a zero gradient, its value restored afterwards: unchanged, no weight decay.
        # Its moments see that zero gradient (docs/optim.md, "Parameters without a gradient").
        kept = [(p, p.detach().clone()) for p in missing]
        lr = float(self.param_groups[0]["lr"])
        # Behind any collective the DDP hook queued on this communicator.
        core.run(comm, "step", ctypes.c_void_p(self._flat_p.data_ptr()),
                 ctypes.c_void_p(self._flat_g.data_ptr()), lr)
        for p, value in kept:
            p.detach().copy_(value)
        return loss   # the parameters are views of _flat_p: already updated
