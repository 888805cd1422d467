"""terse.optim.OneBitAdam: AdamW whose only communication after a warm-up is a compressed,
error-fed allreduce of the momentum (1-bit Adam, Tang et al. 2021), run by terse's C++ core
(optim/, through libterse.so's terse_onebit_adam_* functions). docs/optim.md and docs/pytorch.md.

    import terse.optim
    model = DistributedDataParallel(net)
    opt = terse.optim.OneBitAdam(model.parameters(), lr=3e-3, codec="onebit", warmup_steps=100)
    opt.attach(model)   # DDP averages gradients during warm-up; afterwards it sends nothing
    for batch in data:
        loss = ...; loss.backward(); opt.step(); opt.zero_grad()

Why: with Adam, error feedback on compressed *gradients* hurts training (Adam divides by the
gradient's second moment, which compression changes); once the variance is frozen the update is
linear in the momentum, which can then be compressed with error feedback like SGD's gradient.

Without attach(), the optimizer averages the warm-up gradients itself with terse's uncompressed
allreduce, so it also works with no DDP at all (each rank computing its own gradients).
"""
import torch

from . import _agree
from ._optim_base import FlatOptimizer, OneBitAdamCore, OneBitAdamOptions, options
from .comm import canonical_spec
from .ddp import _handoff_to_terse, cuda_path

__all__ = ["OneBitAdam", "skip_after_warmup_hook"]

_FORMAT = "terse.optim.OneBitAdam/1"


class OneBitAdam(FlatOptimizer):
    """AdamW for data-parallel training whose communication after ``warmup_steps`` is one
    compressed allreduce of the momentum per step (``codec``: any terse spec, "onebit" default).

    lr, betas, eps and weight_decay are torch.optim.AdamW's (decoupled decay, bias correction);
    during warm-up a step is AdamW's on the averaged gradients (within float rounding). Learning-
    rate schedulers work as with AdamW: each step reads ``param_groups[0]["lr"]``.

    warmup_steps > 0 freezes the variance after exactly that many steps; 0 decides from the
    variance: every ``variance_check_interval`` steps its relative L1 change since the previous
    check is compared with ``variance_tolerance``, never before ``min_warmup_steps``, always by
    ``max_warmup_steps`` (docs/optim.md).

    One parameter group of float32 parameters, all on the CPU or all on one CUDA device (the
    state is one flat buffer there; CUDA needs a libterse.so built with CUDA, and the process's
    first visible GPU, docs/cuda.md). Every rank must build it with the same parameters in the
    same order and the same options: construction checks this with one small allreduce and
    raises ValueError on every rank when a rank differs.
    """

    _who = "OneBitAdam"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 codec="onebit", warmup_steps=100, variance_check_interval=20,
                 variance_tolerance=0.1, min_warmup_steps=40, max_warmup_steps=2000,
                 communicator=None):
        self._comm = communicator
        self._core = None
        self.codec = codec
        self._config = dict(warmup_steps=warmup_steps,
                            variance_check_interval=variance_check_interval,
                            variance_tolerance=variance_tolerance,
                            min_warmup_steps=min_warmup_steps, max_warmup_steps=max_warmup_steps)
        self._average = True   # attach() hands the warm-up averaging to DDP
        # Every rank checks its own arguments, then all ranks agree on what they passed: a rank
        # whose arguments are refused, or differ from rank 0's, fails construction everywhere.
        try:
            self._init_flat(params, lr, betas, eps, weight_decay)
            self.device = self._check_params()
        except (TypeError, ValueError) as error:
            self._refuse(error)
            raise
        self._agree()
        self._flat_p = torch.empty(self.count, dtype=torch.float32, device=self.device)
        self._flat_g = torch.empty(self.count, dtype=torch.float32, device=self.device)
        self._alias_params()
        self._core = self._create()

    # -- what every rank must pass alike ---------------------------------------------------------

    def _check_params(self):
        """The one device all parameters are on (CPU, or a CUDA device terse's device path
        takes), or ValueError saying what is wrong."""
        devices = []
        for i, p in zip(self._index, self._params):
            if p.dtype != torch.float32:
                raise ValueError(f"terse: parameter {i} is {p.dtype} on {p.device}; OneBitAdam "
                                 f"takes float32 CPU parameters, or float32 parameters on one "
                                 f"CUDA device")
            if p.device not in devices:
                devices.append(p.device)
        if len(devices) > 1:
            raise ValueError(f"terse: the parameters are on {', '.join(map(str, devices))}; "
                             f"OneBitAdam keeps them in one flat buffer on one device")
        device = devices[0] if devices else torch.device("cpu")
        path, why = cuda_path(device)
        if path not in ("host", "device"):
            raise ValueError(f"terse: OneBitAdam cannot take parameters on {device}: {why}")
        return device

    def _options_text(self):
        """The options every rank must pass alike, as text for _agree.agree."""
        group = self.param_groups[0]
        codec = self.codec
        try:   # "onebit" and "onebit:block=2048" are the same codec
            codec = canonical_spec(codec)
        except Exception:  # noqa: BLE001 -- an invalid spec fails in _create, with its message
            pass
        return repr((codec, tuple(float(b) for b in group["betas"]), float(group["eps"]),
                     float(group["weight_decay"]), sorted(self._config.items())))

    def _agree(self):
        """One small allreduce at construction (terse._agree): the parameters that take
        gradients (shapes and dtypes, in order) and the options. Parameters in another order on
        one rank would otherwise be averaged position by position with other ranks' parameters,
        silently (issue #35)."""
        _agree.agree(self.communicator, "OneBitAdam", self._params, self._options_text())

    # -- the C object ---------------------------------------------------------------------------

    def _create(self):
        if not isinstance(self.codec, str):
            raise TypeError(f"terse: codec must be a spec string such as 'onebit', not "
                            f"{type(self.codec).__name__}")
        group = self.param_groups[0]
        beta1, beta2 = (float(b) for b in group["betas"])
        opts = options(OneBitAdamOptions, beta1=beta1, beta2=beta2, eps=float(group["eps"]),
                       weight_decay=float(group["weight_decay"]), codec=self.codec.encode(),
                       average_gradients=1 if self._average else 0, **self._config)
        return OneBitAdamCore.create(self.count, opts)

    # -- DDP -------------------------------------------------------------------------------------

    def attach(self, ddp_model):
        """Registers skip_after_warmup_hook on a DistributedDataParallel model: DDP's allreduce
        averages the warm-up gradients (so this optimizer does not average them again), and after
        the warm-up DDP communicates nothing and each rank's own gradient reaches step()."""
        if self.steps != 0:
            raise RuntimeError("terse: attach() before the first step")
        self._average = False
        # Recreate the C object with average_gradients off (its options are part of its state).
        old, self._core = self._core, self._create()
        old.close()
        ddp_model.register_comm_hook(self, skip_after_warmup_hook)
        return self

    # -- the step (FlatOptimizer.step) ------------------------------------------------------------

    def _before_core_step(self, missing):
        if self.device.type == "cuda":
            # The gradients were copied on torch's current stream; terse's kernels run on the
            # legacy default stream and return when they are done (docs/cuda.md).
            _handoff_to_terse(self.device)

    # -- checkpoints -----------------------------------------------------------------------------

    def state_dict(self):
        """torch's optimizer state_dict plus "terse": the C state's checkpoint bytes (first and
        second moments, the frozen variance, the worker and server residuals, the step and the
        phase; docs/optim.md) as a uint8 tensor, so torch.save stores it. Residuals are this
        rank's: save one file per rank."""
        sd = super().state_dict()
        comm = self.communicator
        sd["terse"] = {"format": _FORMAT, "codec": self.codec, "steps": self.steps,
                       "frozen_at": self.frozen_at, "rank": comm.rank, "world_size": comm.size,
                       "state": torch.frombuffer(bytearray(self._core.to_bytes()),
                                                 dtype=torch.uint8)}
        return sd

    def load_state_dict(self, state_dict, reset_residuals=False):
        """Loads a state_dict() of a OneBitAdam over the same parameters. A checkpoint taken at
        another world size loads too: moments and worker residuals carry over, the server residual
        of the old partition restarts at zero (terse never applies it to another chunk).

        The residuals are the saving rank's own compression error: a rank that loads another
        rank's file (a grown world's new ranks) passes reset_residuals=True, so that error is not
        applied twice. The moments are the same in every rank's file."""
        state_dict = dict(state_dict)
        ours = state_dict.pop("terse", None)
        if not isinstance(ours, dict) or ours.get("format") != _FORMAT:
            raise ValueError(f"terse: not a OneBitAdam state_dict (no 'terse' entry of format "
                             f"{_FORMAT!r})")
        data = ours["state"].numpy().tobytes()
        # Header fields at fixed offsets (docs/optim.md, "Checkpoint format"); the C decoder
        # validates everything else.
        if len(data) < 72:
            raise ValueError("terse: the OneBitAdam state is truncated")
        count = int.from_bytes(data[8:16], "little")
        averaged = int.from_bytes(data[68:72], "little")
        if count != self.count:
            raise ValueError(f"terse: the checkpoint holds state for {count} elements, these "
                             f"parameters have {self.count}")
        if bool(averaged) != self._average:
            raise ValueError("terse: the checkpoint was saved " +
                             ("without" if averaged else "with") + " attach() to a DDP model "
                             "and this optimizer is " + ("" if self._average else "not ") +
                             "attached; attach() (or not) as when it was saved, then load")
        core = OneBitAdamCore.from_bytes(data)
        super().load_state_dict(state_dict)
        old, self._core = self._core, core
        old.close()
        self.codec = ours["codec"]
        if reset_residuals:
            core.reset_residuals()

    def shrink(self, communicator):
        """After ``Communicator.shrink``: continue on ``communicator`` (the survivors;
        collective over it). The state is replicated, so the moments, step and phase stay; the
        error-feedback residuals are re-laid out for the new world (this rank's worker residual
        kept, the server residuals re-cut, the dead ranks' share of them lost). The old
        communicator is the caller's to close; with attach(), DDP's own process group must be
        rebuilt over the survivors too."""
        self._core.run(communicator, "shrink")
        self._comm = communicator


def skip_after_warmup_hook(optimizer, bucket):
    """DDP communication hook for OneBitAdam.attach(): DDP's allreduce of the bucket (averaged)
    during warm-up; afterwards the bucket's own gradients, unchanged and unsent, since
    OneBitAdam's step does the only communication."""
    tensor = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
    if optimizer.frozen:
        fut = torch.futures.Future()
        fut.set_result(tensor)
        return fut
    import torch.distributed as dist
    group = dist.group.WORLD
    world = dist.get_world_size(group)
    tensor.div_(world)
    work = dist.all_reduce(tensor, group=group, async_op=True)
    return work.get_future().then(lambda f: f.value()[0])
