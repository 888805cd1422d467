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

from . import _agree
from ._optim_base import (CoreOptimizer, FlatOptimizer, ShardedCore, ShardedOneBitAdamOptions,
                          options)

__all__ = ["ShardedOneBitAdam", "FSDPShardedOneBitAdam", "combine"]

_FORMAT = "terse.sharded_optim.ShardedOneBitAdam/1"
_FSDP_FORMAT = "terse.sharded_optim.FSDPShardedOneBitAdam/1"


def _codec_name(spec):
    return spec.split(":", 1)[0].strip().lower()


def _options_text(group, feedback):
    """The options the sharded cores do not compare across ranks themselves, as text for
    _agree.agree."""
    return repr((tuple(float(b) for b in group["betas"]), float(group["eps"]),
                 float(group["weight_decay"]), bool(feedback)))


def combine(state_dicts):
    """One state_dict from every saving rank's state_dict() (ShardedOneBitAdam's or
    FSDPShardedOneBitAdam's), which every rank then loads."""
    parts, units = [], {}
    for sd in state_dicts:
        ours = sd.get("terse") if isinstance(sd, dict) else None
        if not isinstance(ours, dict) or ours.get("format") not in (_FORMAT, _FSDP_FORMAT):
            raise ValueError(f"terse: not a ShardedOneBitAdam state_dict (format {_FORMAT!r} "
                             f"or {_FSDP_FORMAT!r})")
        if ours["format"] != state_dicts[0]["terse"]["format"]:
            raise ValueError("terse: combine() got state_dicts of two kinds of optimizer")
        if ours["format"] == _FORMAT:
            parts.extend(ours["parts"])
        else:
            for name, unit_parts in ours["units"].items():
                units.setdefault(name, []).extend(unit_parts)
    out = dict(state_dicts[0])
    if state_dicts[0]["terse"]["format"] == _FORMAT:
        out["terse"] = dict(state_dicts[0]["terse"], parts=parts)
    else:
        out["terse"] = dict(state_dicts[0]["terse"], units=units)
    return out


def _lost_blobs(lost_parts):
    """The checkpoint parts in `lost_parts` (None, a state_dict or combine() of some, or a list of
    them), as bytes."""
    if lost_parts is None:
        return []
    if isinstance(lost_parts, dict):
        lost_parts = [lost_parts]
    blobs = []
    for sd in lost_parts:
        ours = sd.get("terse") if isinstance(sd, dict) else None
        if not isinstance(ours, dict) or "parts" not in ours:
            raise ValueError("terse: lost_parts must be state_dict()s of the optimizer (or their "
                             "combine()), as the ranks saved them")
        blobs += [t.numpy().tobytes() for t in ours["parts"]]
    return blobs


class _Sharded:
    """What ShardedOneBitAdam and FSDPShardedOneBitAdam share: their codec settings and their
    cores (ShardedCore, each over rank comm.rank's shard)."""

    def _settings(self, codec, param_codec, warmup_steps, error_feedback, local_momentum):
        if not isinstance(codec, str) or not isinstance(param_codec, str):
            raise TypeError(f"terse: codec must be a spec string such as 'onebit', not "
                            f"{type(codec).__name__}")
        self.codec = codec
        self.param_codec = param_codec
        self._warmup = int(warmup_steps)
        self._feedback = bool(error_feedback)
        # Local momentum is what keeps a codec that needs error feedback (onebit) stable, so it
        # follows error_feedback unless asked otherwise (docs/optim.md, "Which codec").
        self._local = self._feedback if local_momentum is None else bool(local_momentum)

    def _agree_layout(self, layout):
        """The parameters' layout and the options the cores do not compare across ranks
        themselves (_agree.agree); the others (warm-up, local momentum, codecs) are the cores'
        own check at their first step."""
        _agree.agree(self.communicator, self._who, layout,
                     _options_text(self.param_groups[0], self._feedback))

    def _new_core(self, count):
        group = self.param_groups[0]
        beta1, beta2 = (float(b) for b in group["betas"])
        opts = options(ShardedOneBitAdamOptions, beta1=beta1, beta2=beta2,
                       eps=float(group["eps"]), weight_decay=float(group["weight_decay"]),
                       codec=self.codec.encode(), warmup_steps=self._warmup,
                       error_feedback=1 if self._feedback else 0,
                       param_codec=self.param_codec.encode(),
                       local_momentum=1 if self._local else 0)
        comm = self.communicator
        return ShardedCore.create(count, comm.size, comm.rank, opts)

    @property
    def state_bytes(self):
        """Bytes of optimizer state on this rank (moments, scales, residuals), over every core."""
        return sum(core.state_bytes for core in self._cores())


class ShardedOneBitAdam(_Sharded, FlatOptimizer):
    """AdamW for data-parallel training with sharded optimizer state: after ``warmup_steps`` each
    step is a compressed reduce-scatter of the gradients (``codec``, "int8" by default; pass
    ``error_feedback=True`` for biased codecs such as onebit, docs/optim.md says why int8 is the
    default) and an all-gather of the parameters, exact unless
    ``param_codec`` names a codec (e.g. "int8": the owner then keeps an fp32 master shard and
    every rank's parameters are the decoded, identical values).

    One parameter group of float32 CPU parameters; every rank must build it with the same
    parameters in the same order and the same options (construction checks the layout and
    betas, eps, weight_decay and error_feedback with one small allreduce; the core compares the
    rest at its first step). Parameters with requires_grad=False are never touched; one whose
    grad is None on every rank keeps its value (docs/optim.md, "Parameters without a
    gradient"). ``communicator``: a terse.comm Communicator (default: the process's shared one).
    """

    _who = "ShardedOneBitAdam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 codec="int8", warmup_steps=100, error_feedback=False, param_codec="none",
                 local_momentum=None, communicator=None, buddy_copy=False):
        self._comm = communicator
        self._buddy = bool(buddy_copy)
        self._core = None
        # Every rank checks its own arguments, then all agree on the parameters' layout: a rank
        # whose arguments are refused, or whose layout differs, fails construction everywhere.
        try:
            self._settings(codec, param_codec, warmup_steps, error_feedback, local_momentum)
            self._init_flat(params, lr, betas, eps, weight_decay)
            for i, p in zip(self._index, self._params):
                if p.dtype != torch.float32 or p.device.type != "cpu":
                    raise ValueError(f"terse: parameter {i} is {p.dtype} on {p.device}; "
                                     f"ShardedOneBitAdam takes float32 CPU parameters")
        except (TypeError, ValueError) as error:
            self._refuse(error)
            raise
        self._agree_layout(self._params)
        self._flat_p = torch.empty(self.count, dtype=torch.float32)
        self._flat_g = torch.empty(self.count, dtype=torch.float32)
        self._alias_params()
        self._core = self._new_core(self.count)
        self._core.set_buddy_copy(self._buddy)

    @property
    def shard(self):
        """(offset, length) of this rank's part of the flat parameters."""
        return self._core.shard

    def _before_core_step(self, missing):
        if missing and _codec_name(self.param_codec) != "none":
            # Every rank agreed on `missing`, so every rank raises here, before the core's step.
            raise ValueError(f"terse: ShardedOneBitAdam with param_codec={self.param_codec!r} "
                             f"keeps the exact parameters in its core, which would decay a "
                             f"parameter without a gradient; {len(missing)} parameter(s) have "
                             f"none this step: give them p.grad = torch.zeros_like(p), or set "
                             f"requires_grad=False before making the optimizer")

    def state_dict(self):
        """torch's optimizer state_dict plus "terse": this rank's checkpoint part (its shard's
        moments and offset, the frozen scales, its residual). Save one file per rank; load with
        combine() of all of them."""
        data = self._core.to_bytes()
        sd = super().state_dict()
        comm = self.communicator
        sd["terse"] = {"format": _FORMAT, "codec": self.codec, "rank": comm.rank,
                       "world_size": comm.size,
                       "parts": [torch.frombuffer(bytearray(data), dtype=torch.uint8)]}
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
        comm = self.communicator
        core = ShardedCore.from_parts(blobs, comm.size, comm.rank)
        super().load_state_dict(state_dict)
        core.set_buddy_copy(self._buddy)
        old, self._core = self._core, core
        old.close()
        self.codec = ours["codec"]

    def shrink(self, communicator, lost_parts=None):
        """After ``Communicator.shrink``: continue on ``communicator`` (the survivors; collective
        over it). The dead ranks' shards come from the buddy copies (``buddy_copy=True``: nothing
        lost, the state is what a checkpoint of every rank would load as at the smaller world), or
        else from ``lost_parts``: the dead ranks' state_dict()s of the last checkpoint (a list of
        them, or their combine(); other ranks' parts in it are ignored), whose moments are then as
        old as that checkpoint. A dead rank's shard in neither raises TerseError on every survivor
        naming the lost ranks, and the optimizer stays as it was. The parameters keep their
        values (every rank has them all); the old communicator is the caller's to close."""
        self._core.shrink(communicator, _lost_blobs(lost_parts))
        self._comm = communicator


class _Unit:
    """One FSDP unit's optimizer core (a C ShardedOneBitAdam over the unit's reduce-scatter
    layout) and the reduce-scatter comm FSDP2 calls for it."""

    def __init__(self, name, module, indices, count, block, layout, core):
        self.name, self.module = name, module
        # The unit's parameters FSDP2 reduce-scatters (those that take gradients), as indices
        # into its FSDP parameters, in its reduce-scatter order.
        self.indices = indices
        self.count, self.block, self.layout = count, block, layout
        self.core = core   # a ShardedCore
        self.reduced = torch.empty(block, dtype=torch.float32)
        # The unit's parameter shard in the core's layout, the update's in/out buffer (kept:
        # one per step would be an allocation per unit per step). Its padding stays 0: padding
        # has no gradient, so the core leaves it at 0 * decay.
        self.flat = torch.zeros(block, dtype=torch.float32)
        self.pending = False   # reduce() ran, update() not yet
        self.calls = 0

    @property
    def params(self):
        # Looked up each time: loading a state_dict may give FSDP2 new sharded parameters.
        fsdp_params = self.module._get_fsdp_state()._fsdp_param_groups[0].fsdp_params
        return [fsdp_params[i].sharded_param for i in self.indices]


def _fsdp_comm_class():
    # Imported late: terse.fsdp needs torch >= 2.8, and terse.sharded_optim must import without.
    from . import fsdp

    class _OptimizerReduceScatter(fsdp._Alloc, fsdp.ReduceScatter):
        """FSDP2's gradient reduce-scatter for one unit, run by the optimizer's core: warm-up
        averages the gradients uncompressed, afterwards the core's compressed reduce-scatter
        (scaled gradients or local momenta, with the unit's error feedback). The result goes to
        the unit's buffer the optimizer steps from, and to FSDP's output (hence p.grad): the
        averaged gradient during warm-up, the core's reduced values (in its scaled units, not a
        gradient) afterwards."""

        def __init__(self, optimizer, unit):
            self.optimizer, self.unit = optimizer, unit

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            opt, unit = self.optimizer, self.unit
            comm = opt.communicator
            fsdp._check_group(group, comm)
            for t, what in ((input_tensor, "input"), (output_tensor, "output")):
                if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
                    raise TypeError(f"terse.sharded_optim: unit '{unit.name}': the gradient "
                                    f"reduce-scatter's {what} is {t.dtype} on {t.device}; the "
                                    f"sharded OneBitAdam reduces contiguous float32 host "
                                    f"gradients (MixedPrecisionPolicy(reduce_dtype="
                                    f"torch.float32))")
            if input_tensor.numel() != unit.count or output_tensor.numel() != unit.block:
                error = ValueError(
                    f"terse.sharded_optim: unit '{unit.name}': FSDP2 reduce-scatters "
                    f"{input_tensor.numel()} -> {output_tensor.numel()} elements, the optimizer "
                    f"was built for {unit.count} -> {unit.block}, the unit's parameters that "
                    f"took gradients then. FSDP2 leaves out a parameter without a gradient this "
                    f"step (unused in the forward): FSDPShardedOneBitAdam needs a gradient for "
                    f"each of them every step (model.set_reduce_scatter_unused_params(True) "
                    f"gives the unused ones zeros, which the optimizer applies as a zero "
                    f"gradient), or requires_grad=False before it is made; or the parameters "
                    f"changed after it was made")
                # The other ranks may be in this reduce-scatter already: they fail it at once.
                _agree.refuse(comm, error)
                raise error
            kind, factor = fsdp._terse_op(op)
            # The core averages; FSDP2 wants the average (AVG), the sum (SUM) or the sum of the
            # inputs times f (PREMUL_SUM(f)) in its output.
            scale = 1.0 if kind == "avg" else comm.size * (1.0 if factor is None else factor)

            unit.core.run(comm, "reduce", ctypes.c_void_p(input_tensor.data_ptr()),
                          ctypes.c_void_p(unit.reduced.data_ptr()))
            unit.pending = True
            unit.calls += 1
            output_tensor.copy_(unit.reduced)
            if scale != 1.0:
                output_tensor.mul_(scale)
            return None

    return _OptimizerReduceScatter


class FSDPShardedOneBitAdam(_Sharded, CoreOptimizer):
    """ShardedOneBitAdam for a model under FSDP2 (``fully_shard``): the optimizer state is the
    rank's FSDP shard's (m, v, frozen scales; with error feedback the unit's worker residual
    and, with ``local_momentum``, the rank's own momentum over each unit), and the optimizer
    takes over every unit's gradient reduce-scatter (FSDP2's ``set_custom_reduce_scatter``):
    uncompressed averaging during warm-up, then the compressed reduce-scatter of ``codec``.
    FSDP2 keeps all-gathering the (sharded, exact) weights itself, or terse does with
    ``terse.fsdp.apply(model, weight_codec=...)`` called *before* this optimizer is made (its
    reduce-scatter comms are replaced here; its all-gather comms stay).

        for layer in model.layers: fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = FSDPShardedOneBitAdam(model, lr=3e-3, codec="onebit", error_feedback=True,
                                    warmup_steps=60)
        loss.backward(); opt.step(); opt.zero_grad()

    One C core per FSDP unit over the unit's reduce-scatter layout (FSDP2 pads each parameter's
    dim 0 to a multiple of the world size), so a unit's shard is exactly the shard FSDP2 gives
    this rank. Units must be dim-0 sharded with one parameter group, float32 sharded parameters
    on the CPU. One backward per step (gradient accumulation with
    ``set_requires_gradient_sync(False)`` reduces once, which is fine). After the freeze
    ``p.grad`` holds the core's reduced values in its scaled units, not a gradient: gradient
    clipping on them means nothing (1-bit Adam has no clipping either). ``state_dict()`` holds
    this rank's part of each unit's core; every rank loads ``combine()`` of all ranks' parts, at
    the same or another world size.
    """

    _who = "FSDPShardedOneBitAdam"

    def __init__(self, model, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 codec="int8", warmup_steps=100, error_feedback=False, local_momentum=None,
                 communicator=None, buddy_copy=False):
        from . import fsdp   # here: terse.fsdp needs torch >= 2.8, this module does not
        self._comm = communicator
        self._buddy = bool(buddy_copy)
        self._model = model
        self.units = []
        # Every rank checks its own model, then all agree on the units' layout: a rank whose
        # model is refused, or laid out otherwise, fails construction everywhere.
        try:
            self._build(model, lr, betas, eps, weight_decay, codec, warmup_steps,
                        error_feedback, local_momentum, fsdp)
            self._agree_layout([(shape, "torch.float32", u.name) for u in self.units
                                for _, _, shape in u.layout])
        except Exception as error:
            self.close()
            if isinstance(error, (TypeError, ValueError)):
                self._refuse(error)
            raise

    def _cores(self):
        return [u.core for u in getattr(self, "units", [])]

    def _build(self, model, lr, betas, eps, weight_decay, codec, warmup_steps, error_feedback,
               local_momentum, fsdp):
        # The parameter all-gather is FSDP2's (or terse.fsdp's): the cores' codec for it, none,
        # is unused.
        self._settings(codec, "none", warmup_steps, error_feedback, local_momentum)
        self._init_group(list(model.parameters()), lr, betas, eps, weight_decay)
        comm = self.communicator
        world, rank = comm.size, comm.rank
        comm_class = _fsdp_comm_class()
        covered = set()
        for name, module in model.named_modules():
            if not isinstance(module, fsdp.FSDPModule):
                continue
            all_shapes = fsdp.unit_shapes(module)
            if all_shapes is None:
                raise ValueError(f"terse: FSDP unit '{name}' is not laid out as "
                                 f"FSDPShardedOneBitAdam reads (one parameter group, dim-0 "
                                 f"sharding)")
            if not all_shapes:
                continue
            group = module._get_fsdp_state()._fsdp_param_groups[0]
            fsdp_params = group.fsdp_params
            for fp in fsdp_params:
                covered.add(id(fp.sharded_param))
            # FSDP2 reduce-scatters the parameters that have a gradient, in its reduce-scatter
            # order (FSDPParamGroup._reduce_scatter_param_indices, torch >= 2.15: grouped by
            # gradient dtype; the parameters' order before). Those that take no gradient never
            # have one: they are not in the core, and never touched.
            order = getattr(group, "_reduce_scatter_param_indices", None) or \
                list(range(len(fsdp_params)))
            indices = [i for i in order if fsdp_params[i].sharded_param.requires_grad]
            for i in indices:
                p = fsdp_params[i].sharded_param
                if p.dtype != torch.float32 or p.device.type != "cpu":
                    raise ValueError(f"terse: unit '{name}' has a {p.dtype} parameter on "
                                     f"{p.device}; FSDPShardedOneBitAdam takes float32 CPU "
                                     f"parameters (bf16 compute via MixedPrecisionPolicy is fine)")
            if not indices:
                continue
            shapes = [all_shapes[i] for i in indices]
            layout, block = fsdp._rs_blocks(shapes, world)
            unit = _Unit(name, module, indices, world * block, block,
                         [(rows, row, shape) for (rows, row, _), shape in zip(layout, shapes)],
                         self._new_core(world * block))
            unit.core.set_buddy_copy(self._buddy)
            self.units.append(unit)
            if unit.core.shard != (rank * block, block):
                raise RuntimeError(f"terse: unit '{name}': the core's shard {unit.core.shard} "
                                   f"is not FSDP2's ({rank * block}, {block})")
            module.set_custom_reduce_scatter(comm_class(self, unit))
        if not self.units:
            raise ValueError("terse: FSDPShardedOneBitAdam: the model has no FSDP units with "
                             "parameters that take gradients; call fully_shard on its layers and "
                             "on itself first")
        missing = [i for i, p in enumerate(self.param_groups[0]["params"])
                   if id(p) not in covered and p.requires_grad]
        if missing:
            raise ValueError(f"terse: parameters {missing} of the model belong to no FSDP unit "
                             f"this optimizer can step")

    def _locals(self, unit):
        """(local tensor, rows of it, row length) of each of the unit's parameters' shards."""
        out = []
        for p, (rows, row, shape) in zip(unit.params, unit.layout):
            local = p.to_local() if hasattr(p, "to_local") else p
            out.append((local, rows, row))
        return out

    @torch.no_grad()
    def step(self, closure=None):
        loss = self._closure_loss(closure)
        lr = float(self.param_groups[0]["lr"])
        comm = self.communicator
        for unit in self.units:
            if not unit.pending:
                if any(p.grad is not None for p in unit.params):
                    raise RuntimeError(f"terse: unit '{unit.name}' has gradients that did not go "
                                       f"through the optimizer's reduce-scatter (was "
                                       f"set_custom_reduce_scatter, e.g. terse.fsdp.apply, "
                                       f"called after the optimizer was made?)")
                continue
            flat, locals_ = unit.flat, self._locals(unit)
            at = 0
            for local, rows, row in locals_:
                n = local.numel()
                flat[at:at + n].copy_(local.reshape(-1))
                at += rows * row

            unit.core.run(comm, "update", ctypes.c_void_p(flat.data_ptr()),
                          ctypes.c_void_p(unit.reduced.data_ptr()), lr)
            unit.pending = False
            at = 0
            for local, rows, row in locals_:
                n = local.numel()
                local.copy_(flat[at:at + n].view_as(local))
                at += rows * row
        return loss

    def state_dict(self):
        """torch's optimizer state_dict plus "terse": every unit's core (this rank's part). Save
        one per rank; every rank loads combine() of all of them."""
        pending = [u.name for u in self.units if u.pending]
        if pending:
            # The reduce-scatter has advanced the residual and the local momentum already, the
            # moments not yet: a checkpoint now would hold half a step.
            raise RuntimeError(f"terse: state_dict() between backward and step() (units "
                               f"{pending} are reduced, not stepped); save after step()")
        units = {u.name: [torch.frombuffer(bytearray(u.core.to_bytes()), dtype=torch.uint8)]
                 for u in self.units}
        sd = super().state_dict()
        sd["terse"] = {"format": _FSDP_FORMAT, "codec": self.codec,
                       "rank": self.communicator.rank, "world_size": self.communicator.size,
                       "units": units,
                       "shapes": {u.name: [list(shape) for _, _, shape in u.layout]
                                  for u in self.units}}
        return sd

    def load_state_dict(self, state_dict):
        """Loads combine() of every saving rank's state_dict(), at this or another world size.
        FSDP2 lays a unit's elements out per world size (each parameter's dim 0 padded to a
        multiple of it), so at another world size each unit's state is moved element by element
        (terse.fsdp's rs_to_params / params_to_rs): moments and scales with their parameters,
        local momenta and residuals as the old ranks' average."""
        state_dict = dict(state_dict)
        ours = state_dict.pop("terse", None)
        comm = self.communicator
        if not isinstance(ours, dict) or ours.get("format") != _FSDP_FORMAT:
            raise ValueError(f"terse: not an FSDPShardedOneBitAdam state_dict (format "
                             f"{_FSDP_FORMAT!r})")
        from . import fsdp
        saved_world = ours.get("world_size")
        names = {u.name for u in self.units}
        if set(ours["units"]) != names:
            raise ValueError(f"terse: the state_dict's units {sorted(ours['units'])} are not "
                             f"this model's {sorted(names)}")
        made = {}
        try:
            for u in self.units:
                blobs = [t.numpy().tobytes() for t in ours["units"][u.name]]
                if len(blobs) != saved_world:
                    raise ValueError(f"terse: unit '{u.name}' has {len(blobs)} ranks' parts of "
                                     f"a run of {saved_world}; pass combine() of every saving "
                                     f"rank's state_dict")
                shapes = [tuple(shape) for _, _, shape in u.layout]
                if saved_world == comm.size:
                    made[u.name] = ShardedCore.from_parts(blobs, comm.size, comm.rank)
                else:
                    saved_shapes = ours.get("shapes", {}).get(u.name)
                    if saved_shapes is None or [tuple(x) for x in saved_shapes] != shapes:
                        raise ValueError(f"terse: unit '{u.name}': its parameters' shapes "
                                         f"changed since the save ({saved_shapes} -> "
                                         f"{[list(x) for x in shapes]})")
                    _, old_block = fsdp._rs_blocks(shapes, saved_world)
                    where = fsdp.rs_to_params(torch.arange(saved_world * old_block),
                                              shapes, saved_world)
                    source = (fsdp.params_to_rs(where + 1, shapes, comm.size) - 1).contiguous()
                    if source.numel() != u.count:
                        raise RuntimeError(f"terse: unit '{u.name}': {source.numel()} mapped "
                                           f"elements for a core of {u.count}")
                    made[u.name] = ShardedCore.from_parts(blobs, comm.size, comm.rank,
                                                          source=source)
        except Exception:
            for core in made.values():
                core.close()
            raise
        super().load_state_dict(state_dict)
        for u in self.units:
            u.core.close()
            u.core = made[u.name]
            u.core.set_buddy_copy(self._buddy)
            u.pending = False

    def shrink_state(self, communicator, lost_parts=None):
        """After ``Communicator.shrink``, with ``buddy_copy=True``: what the survivors need to go
        on without a rollback, as ``(weights, state_dict)``. Collective over ``communicator``
        (the survivors). FSDP2's mesh is fixed, so the model cannot go on as it is: every
        survivor then builds the model again, loads ``weights`` (the trained parameters' full
        values, by ``named_parameters()`` name; the dead ranks' shards from their buddy copies;
        parameters that take no gradient never change and are not in it), ``fully_shard``s it
        over the new world, makes a new FSDPShardedOneBitAdam on it with ``communicator`` and
        loads ``state_dict`` (every old rank's state as of now, as ``combine()`` of a checkpoint
        of all of them would be: re-laid out for the new world by ``load_state_dict``).
        ``lost_parts`` (dead ranks' state_dict()s of a checkpoint) can stand in for a lost
        optimizer state, but FSDP2's parameter shards of a rank whose buddy copy is gone are lost
        too: that is a ValueError on every survivor (go back to the checkpoint: its weights and
        ``combine()`` of every rank's state_dict). This optimizer is left as it is."""
        from . import fsdp
        pending = [u.name for u in self.units if u.pending]
        old_world, old_rank = self.communicator.size, self.communicator.rank
        # The pending check travels with the old ranks: a kill inside a unit's reduce-scatter can
        # leave it pending on some survivors only, and a survivor that raised alone would leave
        # the others waiting in this collective until the timeout.
        size = communicator.size
        olds = torch.zeros(2 * size)
        olds[communicator.rank] = old_rank
        olds[size + communicator.rank] = 1.0 if pending else 0.0
        communicator.allreduce(olds, "none", "sum")
        survivors = [int(r) for r in olds[:size].tolist()]
        with_pending = [survivors[i] for i in range(size) if olds[size + i].item() > 0]
        if with_pending:
            mine = f" (here: units {pending})" if pending else ""
            raise RuntimeError(f"terse: shrink_state() between backward and step() on old "
                               f"rank(s) {with_pending}{mine}; a failed step leaves units "
                               f"pending only if its reduce-scatter succeeded: call step() "
                               f"first on every rank")
        dead = [r for r in range(old_world) if r not in survivors]
        lost = {}
        for sd in ([lost_parts] if isinstance(lost_parts, dict) else (lost_parts or [])):
            for name, parts in sd["terse"]["units"].items():
                lost.setdefault(name, []).extend(t.numpy().tobytes() for t in parts)
        names = {id(p): n for n, p in self._model.named_parameters()}
        weights, units = {}, {}
        for u in self.units:
            blobs, params = u.core.shrink_parts(communicator, lost.get(u.name, []))
            missing = [d for d in dead if params[d] is None]
            if missing:
                raise ValueError(f"terse: unit '{u.name}': the parameter shards of old rank(s) "
                                 f"{missing} are lost with them (no buddy copy holds them); go "
                                 f"back to the last checkpoint instead")
            # This rank's block of the unit's reduce-scatter layout, as step() lays it out.
            at = 0
            for local, rows, row in self._locals(u):
                u.flat[at:at + local.numel()].copy_(local.reshape(-1))
                at += rows * row
            blocks = torch.empty(communicator.size * u.block, dtype=torch.float32)
            communicator.allgather(u.flat, blocks)
            full = torch.empty(old_world * u.block, dtype=torch.float32)
            for i, r in enumerate(survivors):
                full[r * u.block:(r + 1) * u.block] = blocks[i * u.block:(i + 1) * u.block]
            for d in dead:
                full[d * u.block:(d + 1) * u.block] = params[d]
            shapes = [shape for _, _, shape in u.layout]
            values = fsdp.rs_to_params(full, shapes, old_world)
            at = 0
            for p, shape in zip(u.params, shapes):
                n = 1
                for d in shape:
                    n *= d
                weights[names[id(p)]] = values[at:at + n].view(shape).clone()
                at += n
            units[u.name] = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
        sd = super().state_dict()
        sd["terse"] = {"format": _FSDP_FORMAT, "codec": self.codec, "rank": old_rank,
                       "world_size": old_world, "units": units,
                       "shapes": {u.name: [list(shape) for _, _, shape in u.layout]
                                  for u in self.units}}
        return weights, sd
