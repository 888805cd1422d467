"""terse.sharded_optim.ShardedOneBitAdam: OneBitAdam with ZeRO stage 1/2 sharded optimizer state,
run by terse's C++ core (optim/, libterse.so's terse_sharded_onebit_adam_* functions).
docs/optim.md, "Sharded OneBitAdam".

    from terse.sharded_optim import ShardedOneBitAdam
    opt = ShardedOneBitAdam(model.parameters(), lr=3e-3, codec="int8", warmup_steps=100)
    for batch in data:                       # no DDP: each rank's own gradients reach step()
        loss = ...; loss.backward(); opt.step(); opt.zero_grad()

Every rank keeps all parameters (one flat float32 buffer the parameters become views of) but
the moments only for its shard. Warm-up steps reduce-scatter the gradients uncompressed, run
AdamW on the shard and all-gather the parameters; afterwards the reduce-scatter is compressed
with ``codec`` and the all-gather stays exact (or uses ``param_codec``). Ranks end
bit-identical.

Checkpoints: ``state_dict()`` holds this rank's part; to load, at the same or another world
size, every rank passes ``combine([sd_rank0, sd_rank1, ...])`` (all saving ranks' dicts) to
``load_state_dict``: the moments re-shard by offset.

FSDP2: this class takes a model's full parameters (ZeRO-1/2). Under ``fully_shard`` the
parameters are DTensor shards that FSDP2 itself all-gathers, so the optimizer would step on the
local shard only: that needs a shard-offset constructor (the C core's partition must match
FSDP2's dim-0 Shard placement per parameter, which is not terse's flat chunkRange) and the
reduce-scatter taken over by terse.fsdp's custom comm, which then hands step() the averaged
shard. Not done yet (docs/optim.md).
"""
import ctypes

import torch

from . import _lib
from ._lib import check

__all__ = ["ShardedOneBitAdam", "combine"]

_FORMAT = "terse.sharded_optim.ShardedOneBitAdam/1"


class _Options(ctypes.Structure):
    # terse_sharded_onebit_adam_options_t (include/terse/terse.h); struct_size guards the layout.
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("codec", ctypes.c_char_p),
                ("warmup_steps", ctypes.c_int64),
                ("error_feedback", ctypes.c_int),
                ("param_codec", ctypes.c_char_p),
                ("local_momentum", ctypes.c_int)]


def _require_api():
    l = _lib.lib()
    if getattr(l, "terse_sharded_onebit_adam_create", None) is None:
        raise ImportError(f"terse: {_lib.library_path()} has no terse_sharded_onebit_adam_* "
                          f"functions; rebuild libterse.so from a checkout that has them")
    return l


def combine(state_dicts):
    """One world-size-independent state_dict from every saving rank's state_dict()."""
    parts = []
    for sd in state_dicts:
        ours = sd.get("terse") if isinstance(sd, dict) else None
        if not isinstance(ours, dict) or ours.get("format") != _FORMAT:
            raise ValueError(f"terse: not a ShardedOneBitAdam state_dict (format {_FORMAT!r})")
        parts.extend(ours["parts"])
    out = dict(state_dicts[0])
    out["terse"] = dict(state_dicts[0]["terse"], parts=parts)
    return out


class ShardedOneBitAdam(torch.optim.Optimizer):
    """AdamW for data-parallel training with sharded optimizer state: after ``warmup_steps`` each
    step is a compressed reduce-scatter of the gradients (``codec``, "int8" by default; pass
    ``error_feedback=True`` for biased codecs such as onebit, docs/optim.md says why int8 is the
    default) and an all-gather of the parameters, exact unless
    ``param_codec`` names a codec (e.g. "int8": the owner then keeps an fp32 master shard and
    every rank's parameters are the decoded, identical values).

    One parameter group of float32 CPU parameters; every rank must build it with the same
    parameters in the same order and the same options. ``communicator``: a terse.comm
    Communicator (default: the process's shared one).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 codec="int8", warmup_steps=100, error_feedback=False, param_codec="none",
                 local_momentum=None, communicator=None):
        if not isinstance(lr, (int, float)) or lr < 0:
            raise ValueError(f"terse: lr must be a number >= 0, not {lr!r}")
        if not isinstance(codec, str) or not isinstance(param_codec, str):
            raise TypeError(f"terse: codec must be a spec string such as 'onebit', not "
                            f"{type(codec).__name__}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("terse: ShardedOneBitAdam takes one parameter group (its state is "
                             "one flat buffer); give every parameter the same options")
        self._params = list(self.param_groups[0]["params"])
        for i, p in enumerate(self._params):
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError(f"terse: parameter {i} is {p.dtype} on {p.device}; "
                                 f"ShardedOneBitAdam takes float32 CPU parameters")
        self.count = sum(p.numel() for p in self._params)
        self.codec = codec
        self._warmup = int(warmup_steps)
        self._feedback = bool(error_feedback)
        # Local momentum is what keeps a codec that needs error feedback (onebit) stable, so it
        # follows error_feedback unless asked otherwise (docs/optim.md, "Which codec").
        self._local = self._feedback if local_momentum is None else bool(local_momentum)
        self.param_codec = param_codec
        self._comm = communicator
        self._handle = None
        self._flat_p = torch.empty(self.count, dtype=torch.float32)
        self._flat_g = torch.empty(self.count, dtype=torch.float32)
        self._alias_params()
        self._handle = self._create()

    def _options(self):
        l = _require_api()
        group = self.param_groups[0]
        o = _Options()
        l.terse_sharded_onebit_adam_options_default(ctypes.byref(o))
        o.beta1, o.beta2 = (float(b) for b in group["betas"])
        o.eps = float(group["eps"])
        o.weight_decay = float(group["weight_decay"])
        o.codec = self.codec.encode()
        o.warmup_steps = self._warmup
        o.error_feedback = 1 if self._feedback else 0
        o.param_codec = self.param_codec.encode()
        o.local_momentum = 1 if self._local else 0
        return o

    def _create(self):
        l = _require_api()
        o = self._options()
        comm = self.communicator
        handle = ctypes.c_void_p()
        check(l.terse_sharded_onebit_adam_create(self.count, comm.size, comm.rank,
                                                 ctypes.byref(o), ctypes.byref(handle)))
        return handle

    def _free(self):
        if getattr(self, "_handle", None) is not None:
            _lib.lib().terse_sharded_onebit_adam_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self._free()
        except Exception:  # interpreter shutdown
            pass

    @property
    def communicator(self):
        if self._comm is None:
            from .ddp import default_communicator  # one per process
            self._comm = default_communicator()
        return self._comm

    @property
    def steps(self):
        return int(_lib.lib().terse_sharded_onebit_adam_steps(self._handle))

    @property
    def frozen_at(self):
        return int(_lib.lib().terse_sharded_onebit_adam_frozen_at(self._handle))

    @property
    def shard(self):
        """(offset, length) of this rank's part of the flat parameters."""
        off, length = ctypes.c_size_t(0), ctypes.c_size_t(0)
        check(_lib.lib().terse_sharded_onebit_adam_shard(self._handle, ctypes.byref(off),
                                                         ctypes.byref(length)))
        return off.value, length.value

    @property
    def state_bytes(self):
        """Bytes of optimizer state on this rank (moments, scales, residuals)."""
        return int(_lib.lib().terse_sharded_onebit_adam_state_bytes(self._handle))

    def _alias_params(self):
        # As terse.optim.OneBitAdam: the parameters become views of the flat buffer the C core
        # updates in place (the all-gather writes every rank's shard straight into them).
        at = 0
        with torch.no_grad():
            for p in self._params:
                n = p.numel()
                view = self._flat_p[at:at + n].view_as(p)
                view.copy_(p)
                p.data = view
                at += n
        self._aliased = [p.data_ptr() for p in self._params]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not all(p.data_ptr() == ptr for p, ptr in zip(self._params, self._aliased)):
            self._alias_params()
        at = 0
        for p in self._params:
            n = p.numel()
            if p.grad is None:
                self._flat_g[at:at + n].zero_()
            else:
                self._flat_g[at:at + n].copy_(p.grad.reshape(-1))
            at += n
        lr = float(self.param_groups[0]["lr"])
        comm = self.communicator
        pp = ctypes.c_void_p(self._flat_p.data_ptr())
        gp = ctypes.c_void_p(self._flat_g.data_ptr())

        def call():
            with comm._lock:
                check(_lib.lib().terse_sharded_onebit_adam_step(self._handle, comm._h(), pp, gp,
                                                                lr))
        comm._in_order(call)
        return loss

    def state_dict(self):
        """torch's optimizer state_dict plus "terse": this rank's checkpoint part (its shard's
        moments and offset, the frozen scales, its residual). Save one file per rank; load with
        combine() of all of them."""
        l = _lib.lib()
        size = ctypes.c_size_t(0)
        check(l.terse_sharded_onebit_adam_serialize(self._handle, None, ctypes.byref(size)))
        buf = ctypes.create_string_buffer(size.value)
        check(l.terse_sharded_onebit_adam_serialize(self._handle, buf, ctypes.byref(size)))
        sd = super().state_dict()
        comm = self.communicator
        sd["terse"] = {"format": _FORMAT, "codec": self.codec, "rank": comm.rank,
                       "world_size": comm.size,
                       "parts": [torch.frombuffer(bytearray(buf.raw[:size.value]),
                                                  dtype=torch.uint8)]}
        return sd

    def load_state_dict(self, state_dict):
        """Loads combine() of every saving rank's state_dict(), at any world size."""
        state_dict = dict(state_dict)
        ours = state_dict.pop("terse", None)
        if not isinstance(ours, dict) or ours.get("format") != _FORMAT:
            raise ValueError(f"terse: not a ShardedOneBitAdam state_dict (format {_FORMAT!r})")
        blobs = [t.numpy().tobytes() for t in ours["parts"]]
        if len(blobs) != ours.get("world_size", len(blobs)) and len(blobs) == 1:
            raise ValueError("terse: this state_dict holds one rank's part; pass combine() of "
                             "every saving rank's state_dict")
        if blobs and int.from_bytes(blobs[0][8:16], "little") != self.count:
            raise ValueError(f"terse: the checkpoint is for "
                             f"{int.from_bytes(blobs[0][8:16], 'little')} elements, these "
                             f"parameters have {self.count}")
        keep = [ctypes.create_string_buffer(b, len(b)) for b in blobs]
        ptrs = (ctypes.c_void_p * len(keep))(*[ctypes.cast(k, ctypes.c_void_p) for k in keep])
        sizes = (ctypes.c_size_t * len(keep))(*[len(b) for b in blobs])
        comm = self.communicator
        handle = ctypes.c_void_p()
        check(_lib.lib().terse_sharded_onebit_adam_deserialize(
            ptrs, sizes, len(keep), comm.size, comm.rank, ctypes.byref(handle)))
        super().load_state_dict(state_dict)
        self._free()
        self._handle = handle
        self.codec = ours["codec"]
