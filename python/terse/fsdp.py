"""terse's compressed reduce-scatter and allgather inside PyTorch's FSDP2 (``fully_shard``).

FSDP2 shards every parameter over the ranks, reduce-scatters the gradients after backward and
all-gathers the weights before forward and backward. Both collectives can be replaced per FSDP
unit (``FSDPModule.set_custom_reduce_scatter`` / ``set_custom_all_gather``, torch 2.8 and later);
this module supplies comms that run them over terse's communicator with terse's codecs
(docs/pytorch.md, "FSDP2"):

    from torch.distributed.fsdp import fully_shard
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    state = terse.fsdp.apply(model, grad_codec="int8", weight_codec="none")

- Gradients: any codec. Codecs that want error feedback (onebit, topk, mxfp4, int4; or
  ``error_feedback=True``) keep one residual state per FSDP unit: the worker residual over the
  unit's whole (unsharded, padded) gradient, float32, so 4 bytes per parameter of the unit (a
  reduce-scatter keeps no server residual): the residual of a sharded model is not sharded
  (``TerseFSDP.residual_bytes()`` says what it holds). Checkpoints move to another world size
  (``TerseFSDP.load_state_dict`` with every old rank's state).
- Weights: ``none`` (exact) or a codec without error feedback (int8, fp8, mxfp8, fp16, bf16):
  each rank's shard is compressed once and every rank, the owner included, computes with the
  decoded values, so all ranks hold the same unsharded weights; the sharded weights the
  optimizer updates stay exact (DeepSpeed ZeRO++'s qwZ).
- Mixed precision: FSDP2's MixedPrecisionPolicy (bf16 parameters, float32 reduction) hands the
  comms bf16 weights and float32 gradients; both are terse dtypes.
- The reduction FSDP2 asks for: AVG by default, SUM under ``set_force_sum_reduction_for_comms``,
  PREMUL_SUM(f) under ``set_gradient_divide_factor`` (the input is scaled by f, then summed).

The comms are blocking: each returns once the result is in FSDP's output buffer (on CPU FSDP2
ignores what a reduce-scatter comm returns, so it must be complete by then), and terse's own
thread pool overlaps compression, transfers and reduction inside each call. Tensors must be in
host memory; CUDA tensors are refused with a clear error for now (the C API takes device
pointers in CUDA builds, docs/cuda.md, but this path has not run on a GPU).

Every rank of the FSDP mesh must be a rank of terse's communicator, in the same order (one
dimension of data parallelism; HSDP's replicate dimension is FSDP2's own all-reduce, untouched).

After a rank died, the survivors shard a model loaded from the last checkpoint over the new world
and call ``TerseFSDP.shrink(model, new_communicator)`` (docs/pytorch.md, "Surviving a dead
rank").
"""
import warnings

import torch
import torch.distributed as dist

from ._default_comm import default_communicator
from .comm import Feedback, codec_info

try:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
except ImportError as _e:  # torch before 2.8: no custom comms
    raise ImportError(f"terse.fsdp needs FSDP2's custom comms (torch 2.8 or later; this is "
                      f"torch {torch.__version__}): {_e}") from _e

__all__ = ["TerseReduceScatter", "TerseAllGather", "TerseFSDP", "apply", "unit_shapes",
           "rs_to_params", "params_to_rs"]


def _check_tensor(tensor, what):
    if tensor.device.type != "cpu":
        raise ValueError(f"terse.fsdp: {what} is on {tensor.device}; terse.fsdp takes host "
                         f"tensors only so far (FSDP2 on CPU, init_device_mesh('cpu', ...))")
    if tensor.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"terse.fsdp: {what} has dtype {tensor.dtype}; terse moves float32, "
                        f"float16 and bfloat16 (an FSDP unit whose parameters mix dtypes is "
                        f"all-gathered as bytes, which terse does not take)")


def _check_group(group, comm):
    if group.size() != comm.size or group.rank() != comm.rank:
        raise ValueError(f"terse.fsdp: FSDP's shard group (rank {group.rank()} of "
                         f"{group.size()}) is not terse's world (rank {comm.rank} of "
                         f"{comm.size}); the comms need the shard dimension to span every "
                         f"terse rank in the same order")


def _terse_op(op):
    """(terse op, factor to scale the input by first) for FSDP2's reduce op."""
    kind = getattr(op, "op", op)   # PREMUL_SUM comes as a ReduceOp carrying its factor
    if kind == dist.ReduceOp.AVG:
        return "avg", None
    if kind == dist.ReduceOp.SUM:
        return "sum", None
    if kind == dist.ReduceOp.PREMUL_SUM:
        factor = getattr(op, "factor", None)
        if not isinstance(factor, float):
            raise ValueError("terse.fsdp: PREMUL_SUM without a float factor (a tensor factor "
                             "is not supported)")
        return "sum", factor
    raise ValueError(f"terse.fsdp: FSDP asked for reduce op {kind}; terse reduce-scatters "
                     f"with AVG, SUM or PREMUL_SUM")


def unit_shapes(module):
    """The unsharded shapes of the parameters an FSDP unit manages, in the order FSDP2 lays
    their gradients out for the reduce-scatter (its parameter group), or None where that layout
    is not the one ``rs_to_params`` knows (several parameter groups, a shard dimension other
    than 0) or torch's internals differ."""
    try:
        groups = module._get_fsdp_state()._fsdp_param_groups
    except AttributeError:
        return None
    if not groups:
        return []
    if len(groups) != 1:
        return None
    shapes = []
    for fp in groups[0].fsdp_params:
        placement = getattr(fp, "fsdp_placement", None)
        if placement is None or getattr(placement, "dim", 0) != 0:
            return None
        shapes.append(tuple(fp._orig_size))
    return shapes


def _rs_blocks(shapes, world):
    """FSDP2's reduce-scatter input for parameters of ``shapes`` on ``world`` ranks
    (``foreach_reduce_scatter_copy_in``): ``world`` equal blocks, block i holding chunk i of each
    parameter in turn, a parameter's dim 0 padded to a multiple of ``world`` with each chunk
    ``ceil(d0 / world)`` rows. Returns each parameter's (rows per chunk, row length, offset in a
    block) and the block's length."""
    layout, offset = [], 0
    for shape in shapes:
        d0 = shape[0] if shape else 1
        row = 1
        for d in shape[1:]:
            row *= d
        rows = -(-d0 // world)
        layout.append((rows, row, offset))
        offset += rows * row
    return layout, offset


def rs_to_params(flat, shapes, world):
    """A tensor laid out as FSDP2's reduce-scatter input on ``world`` ranks (e.g. a worker
    residual) to the parameters' own layout: each parameter's elements, unpadded, one after
    another (padding dropped)."""
    layout, block = _rs_blocks(shapes, world)
    if flat.numel() != world * block:
        raise ValueError(f"terse.fsdp: {flat.numel()} elements are not the reduce-scatter "
                         f"layout of these parameters on {world} ranks ({world * block})")
    blocks = flat.view(world, block)
    parts = []
    for shape, (rows, row, offset) in zip(shapes, layout):
        d0 = shape[0] if shape else 1
        chunks = blocks[:, offset:offset + rows * row].reshape(world * rows, row)
        parts.append(chunks[:d0].reshape(-1))
    return torch.cat(parts) if parts else flat.new_zeros(0)


def params_to_rs(values, shapes, world):
    """The inverse of ``rs_to_params``: the parameters' elements to FSDP2's reduce-scatter
    layout on ``world`` ranks, padding zero."""
    layout, block = _rs_blocks(shapes, world)
    out = values.new_zeros(world * block)
    blocks = out.view(world, block)
    at = 0
    for shape, (rows, row, offset) in zip(shapes, layout):
        d0 = shape[0] if shape else 1
        padded = values.new_zeros(world * rows, row)
        padded[:d0] = values[at:at + d0 * row].view(d0, row)
        at += d0 * row
        blocks[:, offset:offset + rows * row] = padded.view(world, rows * row)
    if at != values.numel():
        raise ValueError(f"terse.fsdp: {values.numel()} values for parameters of {at} elements")
    return out


class _Alloc:
    def allocate(self, size, *, dtype, device):
        # Plain tensors: terse copies into its own message buffers, so nothing needs a special
        # memory pool.
        return torch.empty(*size, dtype=dtype, device=device)


class TerseReduceScatter(_Alloc, ReduceScatter):
    """FSDP2's gradient reduce-scatter over terse with ``codec``; one per FSDP unit, since it
    holds that unit's error-feedback residuals (when the codec wants them, or
    ``error_feedback=True``)."""

    def __init__(self, communicator, codec="int8", error_feedback=None, name="", shapes=None):
        spec, wants = codec_info(codec)
        self.communicator = communicator
        self.shapes = shapes   # unit_shapes(): re-lays the residuals out at another world size
        self.codec = spec
        self.error_feedback = wants if error_feedback is None else bool(error_feedback)
        self.name = name
        self.feedback = None   # a terse.Feedback for the unit's reduce-scatter count
        self.calls = 0

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        comm = self.communicator
        _check_group(group, comm)
        _check_tensor(input_tensor, "the gradient reduce-scatter's input")
        _check_tensor(output_tensor, "the gradient reduce-scatter's output")
        terse_op, factor = _terse_op(op)
        if factor is not None and factor != 1.0:
            input_tensor.mul_(factor)   # FSDP's own staging buffer, discarded after this call
        count = input_tensor.numel()
        feedback = None
        if self.error_feedback:
            if self.feedback is None or self.feedback.count != count:
                # FSDP2 hands a unit the same padded size every step; a new size means another
                # layout, where an old residual would be noise.
                self.feedback = Feedback(self.codec, count)
            feedback = self.feedback
        comm.reduce_scatter(input_tensor, output_tensor, codec=self.codec, op=terse_op,
                            feedback=feedback)
        self.calls += 1
        return None   # complete: the result is in output_tensor

    def residual_bytes(self):
        """Bytes of error-feedback residuals held for this unit: the float32 worker residual over
        the whole (padded) gradient. (A reduce-scatter keeps no server residual: its result is
        not compressed again.)"""
        if self.feedback is None:
            return 0
        return 4 * self.feedback.count


class TerseAllGather(_Alloc, AllGather):
    """FSDP2's weight all-gather over terse with ``codec`` (none: exact)."""

    def __init__(self, communicator, codec="none", name=""):
        spec, wants = codec_info(codec)
        if wants:
            raise ValueError(f"terse.fsdp: weight codec {spec} needs error feedback, which has "
                             f"nothing to accumulate on weights; use none, fp16, bf16, int8, "
                             f"fp8 or mxfp8")
        self.communicator = communicator
        self.codec = spec
        self.name = name
        self.calls = 0

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        comm = self.communicator
        _check_group(group, comm)
        _check_tensor(input_tensor, "the weight all-gather's input")
        _check_tensor(output_tensor, "the weight all-gather's output")
        # FSDP2 passes its input as the view of the output at this rank's offset (in place),
        # which terse's allgather takes as such.
        comm.allgather(input_tensor, output_tensor, codec=self.codec)
        self.calls += 1
        return None


class TerseFSDP:
    """What ``apply`` installed: one (unit name, reduce-scatter comm, all-gather comm) per FSDP
    unit of the model."""

    def __init__(self, communicator, units):
        self.communicator = communicator
        self.units = units

    def residual_bytes(self):
        """Error-feedback residual bytes this rank holds, over every unit."""
        return sum(rs.residual_bytes() for _, rs, _ in self.units)

    def reset(self):
        """Zeroes every residual (e.g. after a step a loss scaler skipped)."""
        for _, rs, _ in self.units:
            if rs.feedback is not None:
                rs.feedback.reset()

    def state_dict(self):
        """Every unit's residuals (``terse_feedback_serialize`` bytes as a uint8 tensor, so
        ``torch.load(weights_only=True)`` reads it) with the codec, the unit's parameter shapes,
        this rank and the world size. Residuals are per rank: save one per rank, beside FSDP's
        own checkpoint."""
        units = {}
        for name, rs, _ in self.units:
            if rs.feedback is not None:
                data = rs.feedback.to_bytes()
                units[name] = {"count": rs.feedback.count,
                               "feedback": torch.frombuffer(bytearray(data), dtype=torch.uint8)}
                if rs.shapes is not None:
                    units[name]["shapes"] = [list(s) for s in rs.shapes]
        return {"codecs": {name: rs.codec for name, rs, _ in self.units}, "units": units,
                "rank": self.communicator.rank, "world": self.communicator.size}

    def load_state_dict(self, state, strict=True):
        """Restores the residuals ``state_dict()`` saved. A unit saved with another codec, or
        (with ``strict``) another rank's state is refused with ValueError.

        At another world size FSDP2 lays each unit's gradient out differently (each parameter's
        dim 0 padded to a multiple of the world size, chunk i of every parameter in rank i's
        block), so pass the list of every old rank's ``state_dict()``: each unit's residuals are
        taken back to the parameters' own layout, averaged over the old ranks (their sum, which
        is what the next reduce-scatter averages in, scaled to the new number of ranks so the
        average it injects is the same) and laid out for this world size. Given only one rank's
        state at another world size, or a unit whose layout terse cannot read, the residuals are
        dropped with a warning and the units start with fresh ones (one step's compression
        error, which error feedback then corrects again)."""
        states = list(state) if isinstance(state, (list, tuple)) else [state]
        if not states:
            raise ValueError("terse.fsdp: load_state_dict got an empty list of states")
        first = states[0]
        mine = {name: rs for name, rs, _ in self.units}
        for st in states:
            for name, spec in st.get("codecs", {}).items():
                if name in mine and mine[name].codec != spec:
                    raise ValueError(f"terse.fsdp: unit '{name}' was saved with codec {spec}, "
                                     f"this state uses {mine[name].codec}")
        world = self.communicator.size
        saved_world = first.get("world")
        if any(st.get("world") != saved_world for st in states):
            raise ValueError("terse.fsdp: the states were saved at different world sizes")
        if saved_world == world:
            own = [st for st in states if st.get("rank") == self.communicator.rank]
            if len(states) > 1:
                if not own:
                    raise ValueError(f"terse.fsdp: no state of rank {self.communicator.rank} "
                                     f"among the {len(states)} given")
                first = own[0]
            elif strict and first.get("rank") != self.communicator.rank:
                raise ValueError(f"terse.fsdp: this state is rank {first.get('rank')}'s, not rank "
                                 f"{self.communicator.rank}'s (strict=False to load it anyway)")
            for name, saved in first.get("units", {}).items():
                if name not in mine:
                    raise ValueError(f"terse.fsdp: the state has unit '{name}', which this model "
                                     f"has not")
                mine[name].feedback = Feedback.from_bytes(_bytes_of(saved))
            return
        if not first.get("units"):
            return
        ranks = sorted(st.get("rank") for st in states)
        if ranks != list(range(saved_world or 0)):
            warnings.warn(f"terse.fsdp: residuals saved at world size {saved_world} need every "
                          f"old rank's state to move to this world of {world} (got ranks "
                          f"{ranks}); starting fresh")
            return
        for name in first["units"]:
            if name not in mine:
                raise ValueError(f"terse.fsdp: the state has unit '{name}', which this model "
                                 f"has not")
            rs = mine[name]
            saved_shapes = first["units"][name].get("shapes")
            if rs.shapes is None or saved_shapes is None or \
                    [list(s) for s in rs.shapes] != saved_shapes:
                warnings.warn(f"terse.fsdp: unit '{name}': its parameters' layout is unknown or "
                              f"changed since the save; its residuals start fresh")
                continue
            total = None
            for st in states:
                fb = Feedback.from_bytes(_bytes_of(st["units"][name]))
                logical = rs_to_params(torch.frombuffer(fb.worker(), dtype=torch.float32),
                                       rs.shapes, saved_world)
                total = logical.clone() if total is None else total.add_(logical)
                fb.close()
            values = params_to_rs(total / saved_world, rs.shapes, world)
            fresh = Feedback(rs.codec, values.numel())
            torch.frombuffer(fresh.worker(), dtype=torch.float32).copy_(values)
            rs.feedback = fresh


    def shrink(self, model, communicator):
        """Continues on the survivors' world after a rank died (docs/pytorch.md, "Surviving a
        dead rank"). FSDP2's mesh is fixed and the dead rank's shards are gone, so the model
        cannot go on as it is: the survivors load the last checkpoint into a new model,
        ``fully_shard`` it over the new process group (or a DeviceMesh of the new world), and
        pass it here with ``communicator``, the shrunk terse communicator
        (``Communicator.shrink``). Returns a TerseFSDP installed on ``model``'s units with this
        state's codecs. Each unit's residual, this rank's own gradient error laid out for the
        old world's reduce-scatter, is re-laid out for the new world's (each parameter's dim 0
        padded to the new world size); a unit whose layout is unknown or changed, or that the
        old model had not, starts from zero residuals. The dead rank's residuals are lost.
        Every survivor calls it, collectively, before the next forward."""
        new_world = communicator.size
        old_world = self.communicator.size
        old = {name: rs for name, rs, _ in self.units}
        fresh = apply(model, communicator=communicator, grad_codec="none")
        for index, (name, rs, ag) in enumerate(fresh.units):
            before = old.get(name)
            if before is None:
                raise ValueError(f"terse.fsdp: shrink(): the new model has unit '{name}', which "
                                 f"the old one had not; pass the same model, re-sharded")
            mine = TerseReduceScatter(communicator, before.codec, before.error_feedback,
                                      name=name, shapes=rs.shapes)
            theirs = next(a for n, _, a in self.units if n == name)
            gather = TerseAllGather(communicator, theirs.codec, name=name)
            if before.feedback is not None and before.shapes is not None and \
                    rs.shapes is not None and list(before.shapes) == list(rs.shapes):
                logical = rs_to_params(torch.frombuffer(before.feedback.worker(),
                                                        dtype=torch.float32).clone(),
                                       before.shapes, old_world)
                values = params_to_rs(logical, rs.shapes, new_world)
                mine.feedback = Feedback(mine.codec, values.numel())
                torch.frombuffer(mine.feedback.worker(), dtype=torch.float32).copy_(values)
            elif before.feedback is not None:
                warnings.warn(f"terse.fsdp: unit '{name}': its parameters' layout is unknown or "
                              f"changed; its residuals start from zero on the new world")
            module = dict(model.named_modules())[name]
            module.set_custom_reduce_scatter(mine)
            module.set_custom_all_gather(gather)
            fresh.units[index] = (name, mine, gather)
        return fresh


def _bytes_of(saved):
    return bytes(saved["feedback"].numpy().tobytes())


def apply(model, grad_codec="int8", weight_codec="none", error_feedback=None,
          communicator=None):
    """Installs terse's comms on every FSDP unit of ``model`` (every submodule that
    ``fully_shard`` was applied to, the root included): gradients reduce-scatter with
    ``grad_codec`` (error feedback per unit where the codec wants it, or as
    ``error_feedback`` says), weights all-gather with ``weight_codec``. ``communicator``
    defaults to the process's terse communicator (``terse.ddp.default_communicator()``; creating
    it is collective). Returns a TerseFSDP. Call it after ``fully_shard`` and before the first
    forward, on every rank alike."""
    if communicator is None:
        communicator = default_communicator()
    units = []
    for name, module in model.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        rs = TerseReduceScatter(communicator, grad_codec, error_feedback, name=name,
                                shapes=unit_shapes(module))
        ag = TerseAllGather(communicator, weight_codec, name=name)
        module.set_custom_reduce_scatter(rs)
        module.set_custom_all_gather(ag)
        units.append((name, rs, ag))
    if not units:
        raise ValueError("terse.fsdp.apply: the model has no FSDP units; call "
                         "torch.distributed.fsdp.fully_shard on its layers and on itself first")
    return TerseFSDP(communicator, units)
