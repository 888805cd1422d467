"""A DistributedDataParallel communication hook that allreduces gradient buckets through terse.

    import terse.ddp
    state = terse.ddp.TerseState("onebit")          # after dist.init_process_group(...)
    model.register_comm_hook(state, terse.ddp.terse_hook)
    ...
    torch.save({"model": ..., "terse": state.state_dict()}, f"ckpt-rank{rank}.pt")  # per rank
    state.load_state_dict(torch.load(f"ckpt-rank{rank}.pt")["terse"])

After a rank died, the survivors go on with ``state.shrink(new_communicator)``
(``terse.ddp.shrink_default()`` shrinks the process-wide one): docs/pytorch.md, "Surviving a
dead rank".

See docs/pytorch.md for what the hook does, its costs and the measurements.
"""
import ctypes
import threading
import warnings

import torch

from . import _lib
from ._default_comm import default_communicator, shrink_default, shutdown
from .comm import _DTYPES, Feedback, canonical_spec, codec_info

__all__ = ["TerseState", "terse_hook", "register", "default_communicator", "shutdown",
           "shrink_default", "is_failure", "cuda_path"]

_FORMAT = "terse.ddp/1"


# ---- CUDA tensors ------------------------------------------------------------------------------
# terse's C API takes CUDA device pointers in CUDA builds (docs/cuda.md): the codecs then run on
# the GPU on the legacy default stream and only compressed bytes cross PCIe. Two limits decide
# whether a CUDA tensor can take that path: the loaded libterse.so must have been built with CUDA
# (terse_cuda_info; a CPU build would read a device pointer as host memory), and the tensor must
# be on the process's first visible device, because terse's collective thread launches its
# kernels on that thread's current device, which is device 0 (docs/cuda.md, "From Python").


def _device_index(device):
    index = getattr(device, "index", None)
    if index is None:
        # torch.device("cuda") means the current device.
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return index


def cuda_path(device, info="library"):
    """How terse reduces a tensor on `device`: (path, why). path is "host" for CPU tensors,
    "device" when terse's CUDA path takes it, "staged" when a CUDA tensor must go through a host
    copy instead (why says the reason), "unsupported" for other devices. `info` is the library's
    (built, usable) (terse_cuda_info; None for a library that predates it); by default the loaded
    library's."""
    kind = getattr(device, "type", "cpu")
    if kind == "cpu":
        return "host", ""
    if kind != "cuda":
        return "unsupported", (f"terse takes CPU and CUDA tensors, and this one is on {device}")
    if info == "library":
        info = _lib.cuda_info()
    if info is None:
        return "staged", (f"{_lib.library_path()} predates terse_cuda_info (an older build): "
                          f"rebuild it to reduce CUDA tensors on the GPU")
    built, usable = info
    if not built:
        return "staged", (f"{_lib.library_path()} was built without CUDA (configure terse with "
                          f"nvcc on PATH, docs/cuda.md, to reduce CUDA tensors on the GPU)")
    if not usable:
        return "staged", ("libterse.so was built with CUDA but finds no usable CUDA device in "
                          "this process (driver older than its CUDA runtime?)")
    index = _device_index(device)
    if index != 0:
        return "staged", (f"the tensor is on cuda:{index}, and terse's collective thread runs "
                          f"its kernels on cuda:0; start each rank with CUDA_VISIBLE_DEVICES set "
                          f"to its GPU, so that its GPU is cuda:0")
    return "device", ""


def _handoff_to_terse(device):
    """terse works on the legacy default stream; make it wait for the work torch queued on the
    current stream (which may be another, non-blocking one), so terse reads finished values. terse
    returns only after its own work on that stream finished, so nothing is needed afterwards."""
    current = torch.cuda.current_stream(device)
    legacy = torch.cuda.default_stream(device)
    if current != legacy:
        legacy.wait_stream(current)


def _device_allreduce(comm, tensor, spec, feedback):
    """Averages a CUDA tensor in place through terse's device path (codecs on the GPU)."""
    name = str(tensor.dtype)
    if name not in _DTYPES:
        raise TypeError(f"terse: the bucket has dtype {name}; terse reduces float32, float16 and "
                        f"bfloat16 tensors")
    if not tensor.is_contiguous():
        raise ValueError("terse: the bucket is not contiguous")
    _handoff_to_terse(tensor.device)
    ptr = ctypes.c_void_p(tensor.data_ptr())
    codec = spec.encode()

    # The feedback's handle is read when the call runs, as comm.allreduce does.
    comm._locked(lambda handle: _lib.lib().terse_allreduce(
        handle, ptr, ptr, tensor.numel(), _DTYPES[name], _lib.AVG, codec,
        feedback._h() if feedback is not None else None))
    return tensor


def _wants_feedback(spec):
    """Error feedback by default only where the codec loses most of the information in a step
    (docs/codecs.md, "error feedback wanted"): the library says which (``terse_codec_info``)."""
    return codec_info(spec)[1]


def _bucket_tensor(bucket):
    # GradBucket.buffer() since PyTorch 1.10; get_tensor() before.
    return bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()


def _bucket_index(bucket):
    return bucket.index() if hasattr(bucket, "index") else bucket.get_index()


def is_failure(error):
    """Whether ``error`` (raised out of ``loss.backward()`` or ``optimizer.step()``) is a failed
    terse collective, after which the survivors shrink: a ``TerseError``, or the RuntimeError
    DDP wraps a comm hook's error in ("... TerseError: ...")."""
    if isinstance(error, _lib.TerseError):
        return True
    return isinstance(error, RuntimeError) and "TerseError" in str(error)


class _Entry:
    """The error-feedback state of one bucket index and the bucket layout it was made for."""

    __slots__ = ("layout", "ids", "feedback", "misses")

    def __init__(self, layout, ids, feedback):
        self.layout = layout    # portable: (count, shapes of the parameters in bucket order)
        self.ids = ids          # this process only: the parameters' storage, to see rebuilds
        self.feedback = feedback
        self.misses = 0


class TerseState:
    """State of the terse hook: the codec spec, the communicator and one error-feedback object
    per gradient bucket (keyed by bucket index; re-created when DDP changes that bucket's
    layout, e.g. when it rebuilds its buckets after the first iteration).

    codec: a terse codec spec (docs/codecs.md): "none", "fp16", "bf16", "int8", "fp8",
        "mxfp8", "mxfp4", "int4", "onebit", "topk:ratio=0.01", "auto:max=onebit", ...
        Validated here, on every rank.
    error_feedback: keep what compression left out and add it to the next step's gradient.
        None (default) turns it on for the codecs that ask for it (terse_codec_info: onebit,
        topk, the 4-bit mxfp4 and int4, and auto specs that allow them), off for the others
        (their rounding error is small and unbiased enough without it).
    communicator: a terse.Communicator; default: the process-wide one (default_communicator()),
        created from the launcher's environment (torchrun's RANK / WORLD_SIZE / MASTER_ADDR;
        terse's store listens on MASTER_PORT+1, or TERSE_STORE when set).
    process_group: the group DDP reduces over (default: the whole world). terse always reduces
        over its own communicator, so the two must be the same ranks in the same order; this is
        checked when torch.distributed is initialized.
    overlap: True (default) queues each CPU bucket's reduction on the communicator's background
        thread and returns a pending future, so backward goes on computing the next buckets'
        gradients meanwhile, as DDP's own allreduce does; False reduces inside the hook and
        returns a completed future. CUDA buckets are always reduced inside the hook.
    warmup_steps: the first N iterations reduce uncompressed ("none", no error feedback), as
        PowerSGD's start_powerSGD_iter: a few exact steps while the loss falls fastest. An
        iteration ends with the bucket DDP marks last (``GradBucket.is_last()``).
    """

    def __init__(self, codec="none", error_feedback=None, communicator=None, process_group=None,
                 overlap=True, warmup_steps=0):
        if not isinstance(warmup_steps, int) or isinstance(warmup_steps, bool) or warmup_steps < 0:
            raise ValueError(f"terse: warmup_steps must be an int >= 0, not {warmup_steps!r}")
        self.warmup_steps = warmup_steps
        self.iteration = 0   # completed iterations (buckets marked last), for warmup_steps
        self.spec = canonical_spec(codec)
        self.overlap = bool(overlap)
        self.error_feedback = _wants_feedback(self.spec) if error_feedback is None else bool(
            error_feedback)
        self.comm = communicator if communicator is not None else default_communicator()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            group = process_group if process_group is not None else torch.distributed.group.WORLD
            rank = torch.distributed.get_rank(group)
            size = torch.distributed.get_world_size(group)
            if (rank, size) != (self.comm.rank, self.comm.size):
                raise ValueError(
                    f"terse: DDP's process group is rank {rank} of {size} but terse's "
                    f"communicator is rank {self.comm.rank} of {self.comm.size}; the hook "
                    f"reduces over terse's ranks, which must be the group's (set TERSE_RANK / "
                    f"TERSE_WORLD_SIZE, or use the default group)")
        self._lock = threading.Lock()
        self._buckets = {}   # index -> _Entry in use
        self._pending = {}   # index -> _Entry loaded from a checkpoint, not yet claimed
        self._staging = {}   # index -> pinned host tensor for CUDA buckets
        self.calls = 0       # hook invocations (buckets reduced)
        self.created = 0     # error-feedback objects created (new buckets or new layouts)
        self.claimed = 0     # checkpointed error-feedback objects taken into use
        self.staged_why = ""  # why CUDA buckets went through host copies, when they did
        self.shrinks = 0     # shrink() calls: worlds this state moved to after a failure

    def __repr__(self):
        return (f"TerseState(codec={self.spec!r}, error_feedback={self.error_feedback}, "
                f"overlap={self.overlap}, rank {self.comm.rank} of {self.comm.size}, "
                f"{len(self._buckets)} buckets)")

    # Error feedback per bucket -----------------------------------------------------------

    def feedback(self, index):
        """The Feedback bucket `index` uses now (None before its first reduction)."""
        entry = self._buckets.get(index)
        return entry.feedback if entry is not None else None

    def _feedback_for(self, index, bucket, tensor):
        count = tensor.numel()
        params = bucket.parameters() if hasattr(bucket, "parameters") else None
        if params:
            layout = (count, tuple(tuple(p.shape) for p in params))
            ids = tuple(p.data_ptr() for p in params)
        else:
            layout, ids = (count, ()), None
        entry = self._buckets.get(index)
        pending = self._pending.get(index)
        if pending is not None:
            if pending.layout == layout:
                # The checkpoint was made for this layout: take its residuals.
                del self._pending[index]
                pending.ids = ids
                self._buckets[index] = entry = pending
                self.claimed += 1
                return entry.feedback
            # DDP's first iteration after a restart runs its initial bucket order and rebuilds
            # afterwards, so a checkpoint (made after the rebuild) can match from the second
            # iteration on. Two misses in a row mean the layout has settled elsewhere.
            pending.misses += 1
            if pending.misses >= 2:
                del self._pending[index]
                warnings.warn(
                    f"terse: the checkpointed error-feedback state of bucket {index} was made for "
                    f"another bucket layout ({pending.layout[0]} elements) than DDP uses now "
                    f"({count}); that bucket restarts from zero residuals")
        if entry is not None and entry.layout == layout and entry.ids == ids:
            return entry.feedback
        if entry is not None:
            self.comm.wait()   # a queued reduction may still use it
            entry.feedback.close()
        entry = _Entry(layout, ids, Feedback(self.spec, count))
        self._buckets[index] = entry
        self.created += 1
        return entry.feedback

    def reset(self):
        """Zeroes every bucket's residuals (e.g. after a step a loss scaler skipped), those
        loaded from a checkpoint and not yet in use included."""
        self.comm.wait()
        with self._lock:
            for entry in list(self._buckets.values()) + list(self._pending.values()):
                entry.feedback.reset()

    # After a shrink ----------------------------------------------------------------------

    def shrink(self, communicator):
        """Continues on ``communicator``, the survivors' world after a rank died (this state's
        communicator's ``shrink()``; docs/pytorch.md, "Surviving a dead rank"). Every survivor
        calls it, after the same number of completed steps (roll the hook state back with
        ``load_state_dict`` first when this rank is a step ahead), and before the next
        reduction.

        Collective over the new world when the state holds residuals: each bucket's are re-laid
        out for it (``Communicator.relayout_feedback``, one exchange for every bucket, so every
        survivor must hold the same buckets: restore them alike). The worker residual (this
        rank's own compression error, over the whole bucket) stays; the server residuals (the
        error of re-compressing the chunk each rank owned) are gathered and re-cut for the new
        world's chunks. What the dead rank's residuals held is lost: its server chunk restarts
        from zero. The residuals wait, keyed by bucket layout, for the first
        reduction whose bucket matches, as a loaded checkpoint's do: a DDP re-wrapped on the
        new process group reduces its first iteration in its initial bucket order and rebuilds
        afterwards. The old communicator is left to the caller to close, after this."""
        if communicator is self.comm:
            raise ValueError("terse: shrink() needs the new, shrunk communicator (the old one's "
                             "shrink()), not the one this state already uses")
        try:
            self.comm.wait()   # nothing queued may run on the old world's residuals any more
        except ValueError:
            pass   # the old communicator was closed already: nothing is queued on it
        with self._lock:
            moved, replaced = {}, []
            # Pending entries (a checkpoint loaded just before, e.g. a rollback) come last and
            # win: they are the state the caller chose.
            for index, entry in list(self._buckets.items()) + list(self._pending.items()):
                if index in moved:
                    replaced.append(moved[index])
                moved[index] = entry
            if moved:
                # One exchange on the new world, every survivor's states in bucket order: the
                # server residuals of the old chunks are gathered and each survivor keeps its
                # new chunk's; the worker residuals stay (docs/reliability.md, "Residuals after
                # a shrink"). A failure leaves every state as it was, on every survivor.
                communicator.relayout_feedback([moved[i].feedback for i in sorted(moved)],
                                               old_rank=self.comm.rank,
                                               old_world=self.comm.size)
            for entry in replaced:
                entry.feedback.close()
            for entry in moved.values():
                entry.ids, entry.misses = None, 0
            self._buckets = {}
            self._pending = moved
            self.comm = communicator
            self.shrinks += 1

    # Checkpoints -------------------------------------------------------------------------

    def state_dict(self):
        """This rank's hook state, for torch.save beside the model and optimizer. Residuals are
        per rank: every rank saves and loads its own. Values are tensors, ints, strings and
        lists, so torch.load(..., weights_only=True) reads it."""
        self.comm.wait()
        with self._lock:
            buckets = {}
            for index, entry in list(self._pending.items()) + list(self._buckets.items()):
                data = entry.feedback.to_bytes()
                buckets[int(index)] = {
                    "count": entry.layout[0],
                    "shapes": [list(s) for s in entry.layout[1]],
                    "feedback": torch.frombuffer(bytearray(data), dtype=torch.uint8),
                }
            return {"format": _FORMAT, "codec": self.spec, "error_feedback": self.error_feedback,
                    "rank": self.comm.rank, "world_size": self.comm.size, "buckets": buckets,
                    "iteration": self.iteration}

    def load_state_dict(self, state, strict=True):
        """Replaces the residuals with a checkpoint's. Each bucket's state is applied from the
        first reduction whose bucket layout matches the one it was saved with.

        The codec must be the same (ValueError otherwise). With strict, the checkpoint must come
        from this rank: worker residuals are this rank's own gradient error, and loading rank 0's
        everywhere would add it world-size times. A checkpoint taken at another world size is
        accepted: the worker residuals are kept, and the server residuals, which belong to the
        old world's partition of the tensor, start again from zero (a partition that does not
        match is never applied; terse-train's checkpoints re-partition them instead)."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ValueError(f"terse: not a TerseState checkpoint (expected format {_FORMAT!r}, "
                             f"got {state.get('format') if isinstance(state, dict) else state!r})")
        if state["codec"] != self.spec:
            raise ValueError(f"terse: the checkpoint was made for codec {state['codec']!r} but "
                             f"this state uses {self.spec!r}")
        if strict and state["rank"] != self.comm.rank:
            raise ValueError(f"terse: the checkpoint holds rank {state['rank']}'s residuals and "
                             f"this is rank {self.comm.rank}; save and load one per rank "
                             f"(or pass strict=False)")
        loaded = {}
        try:
            for index, item in state["buckets"].items():
                data = item["feedback"].numpy().tobytes()
                fb = Feedback.from_bytes(data)
                if fb.count != item["count"]:
                    raise ValueError(f"terse: bucket {index} of the checkpoint holds "
                                     f"{fb.count} residuals for a {item['count']}-element bucket")
                layout = (int(item["count"]), tuple(tuple(int(d) for d in s)
                                                    for s in item["shapes"]))
                loaded[int(index)] = _Entry(layout, None, fb)
        except Exception:
            for entry in loaded.values():
                entry.feedback.close()
            raise
        if loaded and not self.error_feedback:
            warnings.warn("terse: the checkpoint holds error-feedback state but this TerseState "
                          "runs without error feedback; it is ignored")
        self.comm.wait()
        with self._lock:
            for entry in list(self._buckets.values()) + list(self._pending.values()):
                entry.feedback.close()
            self._buckets = {}
            self._pending = loaded if self.error_feedback else {}
            # Checkpoints from before warmup_steps existed carry no iteration: past any warm-up.
            self.iteration = int(state.get("iteration", self.warmup_steps))

    # The reduction -------------------------------------------------------------------------

    def _host(self, index, tensor):
        buf = self._staging.get(index)
        if buf is None or buf.numel() != tensor.numel() or buf.dtype != tensor.dtype:
            buf = torch.empty(tensor.numel(), dtype=tensor.dtype,
                              pin_memory=torch.cuda.is_available())
            self._staging[index] = buf
        return buf

    def _codec_now(self, bucket, index, tensor):
        """(spec, feedback) for this bucket: "none" without feedback during warm-up. Counts the
        iteration when the bucket is the last one. Called with the lock held."""
        warm = self.iteration < self.warmup_steps
        last = bucket.is_last() if hasattr(bucket, "is_last") else index == 0
        if last:
            self.iteration += 1
        if warm:
            return "none", None
        fb = self._feedback_for(index, bucket, tensor) if self.error_feedback else None
        return self.spec, fb

    def reduce_async(self, bucket):
        """Queues the bucket's average on the communicator's background thread; returns a
        concurrent.futures.Future of the bucket's tensor (CPU buckets only)."""
        tensor = _bucket_tensor(bucket)
        index = _bucket_index(bucket)
        with self._lock:
            self.calls += 1
            spec, fb = self._codec_now(bucket, index, tensor)
            return self.comm.allreduce_async(tensor, spec, "avg", fb)

    def reduce(self, bucket):
        """Averages the bucket's gradients over the ranks in place; returns the tensor."""
        tensor = _bucket_tensor(bucket)
        index = _bucket_index(bucket)
        with self._lock:
            self.calls += 1
            spec, fb = self._codec_now(bucket, index, tensor)
            path, why = cuda_path(tensor.device)
            if path == "host":
                self.comm.allreduce(tensor, spec, "avg", fb)
            elif path == "device":
                # The codecs run on the GPU; only compressed bytes cross PCIe (docs/cuda.md).
                _device_allreduce(self.comm, tensor, spec, fb)
            elif path == "unsupported":
                raise ValueError(f"terse: {why}")
            else:
                # This libterse.so cannot take the device pointer (why): stage the bucket through
                # a pinned host copy (two PCIe copies per bucket; docs/pytorch.md).
                self.staged_why = why
                host = self._host(index, tensor)
                host.copy_(tensor.reshape(-1))
                self.comm.allreduce(host, spec, "avg", fb)
                tensor.copy_(host.view(tensor.shape))
        return tensor


def _result(fut):
    return fut.wait()


def terse_hook(state, bucket):
    """DDP communication hook: ``model.register_comm_hook(TerseState(...), terse_hook)``.

    Returns a Future of the bucket's averaged gradients, as DDP expects: pending while terse's
    background thread reduces it when the state overlaps (CPU buckets), completed otherwise.
    A failed reduction is the future's error, which DDP raises out of backward().
    """
    if not isinstance(state, TerseState):
        raise TypeError(f"terse_hook's state must be a terse.ddp.TerseState, not "
                        f"{type(state).__name__}")
    if state.overlap and _bucket_tensor(bucket).device.type == "cpu":
        fut = torch.futures.Future()
        done = state.reduce_async(bucket)

        def finish(done):
            error = done.exception()
            if error is None:
                fut.set_result(done.result())
            else:
                fut.set_exception(error)
        done.add_done_callback(finish)
        # DDP reads the value of the future it gets in C++, where a Python future's exception
        # is only an object that fails to cast to a tensor; a then() callback that raises fails
        # its future as an error proper, so backward() raises terse's message.
        return fut.then(_result)
    tensor = state.reduce(bucket)
    if tensor.device.type == "cuda":
        fut = torch.futures.Future(devices=[tensor.device])
    else:
        fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut


def register(model, codec="none", **kwargs):
    """Creates a TerseState, registers terse_hook on a DistributedDataParallel model and returns
    the state (keep it for checkpoints)."""
    state = TerseState(codec, **kwargs)
    model.register_comm_hook(state, terse_hook)
    return state
