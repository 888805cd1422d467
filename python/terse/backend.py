"""terse as a torch.distributed process-group backend (issue 47; docs/pytorch.md, "A
torch.distributed backend").

    import terse.backend                                   # registers "terse"
    dist.init_process_group("terse")                       # or "cpu:terse,cuda:nccl"
    fast = dist.new_group(pg_options=terse.backend.Options(codec="int8"))   # a compressing group

Importing this module registers the backend (``import terse`` does not: it must not import
torch). Every process group gets a terse communicator of its own members, made over the group's
c10d store (terse_comm_create_with_store): torch calls a backend's creator on the members of a
group only, so a split of the world's communicator (collective over the world) cannot be made
there, while the group's own store is at hand on exactly its members and already carries a key
prefix of the group's own. No second port beside torch's store, and any init_method works.

What is exact and how (docs/pytorch.md has the table):
- float32/float16/bfloat16 SUM and AVG: terse's allreduce / reduce-scatter, with the group's codec
  (exact with the default "none").
- Every other dtype and op (integers, bool, float64, MIN, MAX, PRODUCT, BAND/BOR/BXOR, and AVG
  of float64): terse's allgather of each rank's raw bytes (codec "none" copies bits), then a
  local reduction in rank order 0, 1, ..., so every rank computes the same bits. Costs world
  times the bytes of a reduction, always exact, on a compressing group too.
- broadcast, gather, all_gather(_into_tensor), scatter, all_to_all: the same raw-bytes allgather
  (world times the bytes; scatter world squared), never compressed.
- send/recv: refused (terse has no point-to-point).
Each raw-bytes call carries a 64-byte descriptor of the call (collective, op, dtype, sizes,
root); ranks whose descriptors differ all raise the same error naming every rank's.
"""
import contextlib
import ctypes
import datetime
import os
import threading
import warnings

import torch
import torch.distributed as dist

try:
    from torch._C._distributed_c10d import Backend as _C10dBackend
except ImportError as _error:  # torch 1.x: no c10d Backend class to subclass
    raise ImportError(f"terse.backend needs torch 2.8 or later (a c10d Backend that Python can "
                      f"subclass, register_backend with devices=); this is torch "
                      f"{torch.__version__}. The DDP hook (terse.ddp) works with it.") from _error

from . import _lib
from .comm import _DTYPES, Communicator, Feedback, canonical_spec, codec_info
from .ddp import _handoff_to_terse, cuda_path

__all__ = ["NAME", "Options", "TerseBackend", "group_options", "init_process_group"]

NAME = "terse"


class Options:
    """A process group's compression, fixed when the group is made: pass it as ``pg_options`` to
    ``dist.init_process_group`` / ``dist.new_group``, or, where a device-split backend string
    hands pg_options to another backend too ("cpu:terse,cuda:nccl"), make the group inside
    ``with terse.backend.group_options(...)``.

    codec: a terse codec spec (docs/codecs.md); "none" (the default) is exact. It applies to the
        float32/float16/bfloat16 SUM and AVG reductions only (all_reduce, reduce_scatter(_tensor),
        reduce); everything else stays exact on a compressing group (docs/pytorch.md).
    feedback: keep error-feedback residuals per buffer (kind, dtype, size and address of the
        tensor: DDP's buckets are reused every step); None takes the codec's own wish
        (terse_codec_info: onebit and topk want it).
    max_feedback_states: the most residual states a group keeps before it refuses further
        buffers with an error (a caller reducing fresh tensors every step would grow them
        without bound).
    """

    def __init__(self, codec="none", feedback=None, max_feedback_states=1024):
        self.codec = canonical_spec(codec)  # TerseError naming what is accepted for a bad spec
        self.feedback = codec_info(self.codec)[1] if feedback is None else bool(feedback)
        if self.codec == "none":
            self.feedback = False
        self.max_feedback_states = int(max_feedback_states)

    def __repr__(self):
        return f"terse.backend.Options(codec={self.codec!r}, feedback={self.feedback})"


_pending = threading.local()


@contextlib.contextmanager
def group_options(codec="none", feedback=None, **kwargs):
    """Groups made inside this block (by this thread) without pg_options use these options."""
    previous = getattr(_pending, "options", None)
    _pending.options = Options(codec, feedback, **kwargs)
    try:
        yield _pending.options
    finally:
        _pending.options = previous


# ---- Work --------------------------------------------------------------------------------------

class _Work(dist.Work):
    """One collective queued on the group's communicator thread. wait() raises its error;
    get_future() is a torch Future of its output tensors (what DDP's reducer chains on)."""

    def __init__(self, done, outputs):
        super().__init__()
        self._done = done  # concurrent.futures.Future
        self._outputs = outputs
        self._future = None  # made on the first get_future(): plain collectives never ask
        self._future_lock = threading.Lock()

    def wait(self, timeout=None):
        seconds = None
        if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
            seconds = timeout.total_seconds()
        self._done.result(seconds)  # raises the collective's error
        return True

    def is_completed(self):
        return self._done.done()

    def is_success(self):
        return self._done.done() and self._done.exception() is None

    def exception(self):
        return self._done.exception() if self._done.done() else None

    def get_future(self):
        with self._future_lock:
            if self._future is None:
                self._future = self._make_future()
            return self._future

    def _make_future(self):
        done, outputs = self._done, self._outputs
        devices = sorted({t.device for t in outputs if t.device.type == "cuda"}, key=str)
        completed = torch.futures.Future(devices=devices) if devices else \
            torch.futures.Future()

        # A failure must reach C++ readers of the future (DDP's reducer) as the future's error.
        # Future.set_exception does not do that: it stores the exception as the future's value
        # and raises it only when Python unwraps it, so the reducer read an exception object as
        # its tensors and crashed (SIGSEGV in parseCppCommHookResult when a peer died). A `then`
        # callback that raises marks the future it returns with a real error instead.
        def outputs_or_raise(_):
            error = done.exception()
            if error is not None:
                raise error
            return outputs
        future = completed.then(outputs_or_raise)
        # Runs at once, on this thread, when the collective has already finished.
        done.add_done_callback(lambda _: completed.set_result(None))
        return future


# ---- Reductions --------------------------------------------------------------------------------

_LOCAL = {  # exact reductions done locally after the raw-bytes allgather, in rank order
    "SUM": torch.add, "AVG": torch.add, "PRODUCT": torch.mul, "MIN": torch.minimum,
    "MAX": torch.maximum, "BAND": torch.bitwise_and, "BOR": torch.bitwise_or,
    "BXOR": torch.bitwise_xor,
}


def _op_name(op):
    """The ReduceOp's name ("SUM", "MIN", ...). Options carry a ReduceOp object whose RedOpType
    is in .op (torch 2.x), or the enum value itself."""
    kind = getattr(op, "op", op)
    name = getattr(kind, "name", None)
    if name is None:
        name = str(kind).split(".")[-1]
    return name.upper()


def _integer(dtype):
    return not (dtype.is_floating_point or dtype.is_complex)


class TerseBackend(_C10dBackend):
    """A process group's terse communicator as a c10d Backend. Made by torch through the
    registered creator; one queue thread per group runs its collectives in call order."""

    def __init__(self, comm, options, group_name=""):
        super().__init__(comm.rank, comm.size)
        self.comm = comm
        self.terse_options = options
        self.group_name = group_name
        self._feedback = {}      # (kind, dtype, numel, data_ptr) -> Feedback
        self.staged_why = ""     # why CUDA tensors went through host copies, when they did
        self.calls = {}          # collective name -> calls (tests read it)

    def getBackendName(self):  # noqa: N802 -- c10d's name
        return NAME

    def __repr__(self):
        return f"<terse.backend.TerseBackend rank {self.comm.rank} of {self.comm.size}, " \
               f"{self.terse_options!r}>"

    # ---- plumbing ------------------------------------------------------------------------------

    def _queue(self, name, outputs, body):
        """Queues body() on the communicator's thread (in call order, which every rank shares)
        and returns the Work of it."""
        self.calls[name] = self.calls.get(name, 0) + 1
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # The queue thread reads CUDA tensors on its own stream: what the caller's stream
            # queued must be finished first.
            torch.cuda.current_stream().synchronize()
        devices = {t.device for t in outputs if t.device.type == "cuda"}

        def run():
            result = body()
            for device in devices:
                # What the queue thread wrote into CUDA outputs is finished before wait() returns.
                torch.cuda.current_stream(device).synchronize()
            return result
        return _Work(self.comm._submit(run if devices else body), list(outputs))

    def _refuse(self, name, error):
        """A call this rank refuses still takes its place in the ranks' sequence, so the others
        fail their matching call at once (terse_comm_reject) instead of hanging."""
        error = error if str(error).startswith("terse") else type(error)(f"terse: {name}: {error}")
        self.comm._submit(self.comm._refused(error))
        raise error

    def _host(self, tensor):
        """(host tensor to run on, copy-back or None): CPU tensors as they are (contiguous),
        CUDA tensors staged through a host copy (on the queue thread, after _queue synchronised
        the caller's stream)."""
        if tensor.device.type == "cpu":
            if tensor.is_contiguous():
                return tensor, None
            host = tensor.contiguous()
            return host, lambda: tensor.copy_(host)
        if tensor.device.type != "cuda":
            raise ValueError(f"tensors on {tensor.device} are not supported (CPU and CUDA are)")
        path, why = cuda_path(tensor.device)
        if path == "staged" and not self.staged_why:
            self.staged_why = why
            warnings.warn(f"terse: CUDA tensors go through host copies: {why}")
        host = tensor.detach().to("cpu").contiguous()  # synchronises with the caller's stream

        def back():
            tensor.copy_(host)
            torch.cuda.current_stream(tensor.device).synchronize()
        return host, back

    def _device_ok(self, *tensors):
        """Whether every tensor can take terse's CUDA path (float dtype, contiguous, cuda:0
        of a CUDA build): then no host copy is made."""
        for t in tensors:
            if t.device.type != "cuda" or not t.is_contiguous() or str(t.dtype) not in _DTYPES:
                return False
            if cuda_path(t.device)[0] != "device":
                return False
        return True

    @staticmethod
    def _host_float_ok(*tensors):
        """Whether terse can work on the tensors' own memory on the host: contiguous CPU
        float32/float16/bfloat16 tensors."""
        return all(t.device.type == "cpu" and t.is_contiguous() and str(t.dtype) in _DTYPES
                   for t in tensors)

    def _feedback_for(self, kind, tensor):
        if not self.terse_options.feedback:
            return None
        key = (kind, str(tensor.dtype), tensor.numel(), tensor.data_ptr())
        fb = self._feedback.get(key)
        if fb is None:
            if len(self._feedback) >= self.terse_options.max_feedback_states:
                # Refused in the collective's place, so the other ranks fail it too.
                self.comm._refused(RuntimeError(
                    f"terse: this group keeps error feedback for {len(self._feedback)} buffers "
                    f"already (max_feedback_states); residuals are kept per buffer address, so "
                    f"reduce the same buffers every step (as DDP does) or make the group with "
                    f"feedback=False"))()
            fb = self._feedback[key] = Feedback(self.terse_options.codec, tensor.numel())
        return fb

    def _terse_call(self, kind, send, recv, count, tensor, op, codec, feedback):
        """One terse_* collective on send/recv (host or device pointers), on the queue thread."""
        dtype = _DTYPES[str(tensor.dtype)]
        spec = codec.encode()
        l = _lib.lib()
        if tensor.device.type == "cuda":
            _handoff_to_terse(tensor.device)

        def run(handle):
            fb = feedback._h() if feedback is not None else None
            if kind == "allreduce":
                return l.terse_allreduce(handle, send, recv, count, dtype, op, spec, fb)
            if kind == "reduce_scatter":
                return l.terse_reduce_scatter(handle, send, recv, count, dtype, op, spec, fb)
            return l.terse_allgather(handle, send, recv, count, dtype, spec, fb)
        self.comm._locked(run)

    def _float_reduce(self, kind, tensor, out, op):
        """terse's own allreduce (out None: in place) or reduce-scatter into out, of a float32/
        float16/bfloat16 SUM or AVG, with the group's codec. Runs on the queue thread."""
        terse_op = _lib.AVG if op == "AVG" else _lib.SUM
        codec = self.terse_options.codec
        if self._device_ok(tensor, *( [out] if out is not None else [])):
            feedback = self._feedback_for(kind, tensor) if codec != "none" else None
            recv = out if out is not None else tensor
            self._terse_call(kind, ctypes.c_void_p(tensor.data_ptr()),
                             ctypes.c_void_p(recv.data_ptr()), tensor.numel(), tensor, terse_op,
                             codec, feedback)
            return
        host, back = self._host(tensor)
        feedback = self._feedback_for(kind, tensor) if codec != "none" else None
        if out is None:
            self._terse_call(kind, ctypes.c_void_p(host.data_ptr()),
                             ctypes.c_void_p(host.data_ptr()), host.numel(), host, terse_op,
                             codec, feedback)
            if back is not None:
                back()
            return
        hout, back_out = self._host(out)
        self._terse_call(kind, ctypes.c_void_p(host.data_ptr()), ctypes.c_void_p(hout.data_ptr()),
                         host.numel(), host, terse_op, codec, feedback)
        if back_out is not None:
            back_out()

    def _gather_bytes(self, descriptor, payload, size=None, lengths=None):
        """Every rank's ``payload`` (a CPU uint8 tensor of the same length on every rank, or of
        any length with ``size`` = None, which costs a first exchange of the lengths), in rank
        order, through terse's allgather with codec "none" (which copies bits), behind a 64-byte
        descriptor of the call that must be alike on every rank. ``lengths``: each rank's payload
        length where they differ and are known to every rank. Runs on the queue thread."""
        world = self.comm.size
        text = descriptor.encode()[:56]
        if size is None:
            head = self._exchange(text, torch.tensor([payload.numel()], dtype=torch.int64)
                                  .view(torch.uint8))
            lengths = [int(h[64:72].view(torch.int64)) for h in head]
            size = max(lengths)
        elif lengths is None:
            lengths = [payload.numel()] * world
        padded = size + (size & 1)
        body = torch.zeros(padded, dtype=torch.uint8)
        body[:payload.numel()] = payload
        rows = self._exchange(text, body)
        return [row[64:64 + n] for row, n in zip(rows, lengths)]

    def _exchange(self, text, body):
        """One allgather of (64-byte header, body) per rank; raises on every rank when the
        headers differ, naming each rank's."""
        world = self.comm.size
        header = torch.zeros(64, dtype=torch.uint8)
        header[:len(text)] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        header[56:64] = torch.tensor([body.numel()], dtype=torch.int64).view(torch.uint8)
        mine = torch.cat([header, body])
        everyone = torch.empty(world * mine.numel(), dtype=torch.uint8)
        halves = mine.numel() // 2
        self._terse_call("allgather", ctypes.c_void_p(mine.data_ptr()),
                         ctypes.c_void_p(everyone.data_ptr()), world * halves,
                         torch.empty(0, dtype=torch.float16), _lib.SUM, "none", None)
        rows = list(everyone.view(world, mine.numel()))
        heads = [bytes(r[:64].tolist()) for r in rows]
        if any(h != heads[0] for h in heads):
            names = "; ".join(f"rank {r}: {h[:56].rstrip(bytes(1)).decode(errors='replace')} "
                              f"({int(torch.frombuffer(bytearray(h[56:64]), dtype=torch.int64))}"
                              f" bytes)" for r, h in enumerate(heads))
            raise RuntimeError(f"terse: the ranks of the group called different collectives or "
                               f"passed different arguments: {names}")
        return rows

    def _describe(self, name, tensor, op="", root=-1, extra=""):
        text = f"{name}{' ' + op if op else ''} {str(tensor.dtype)[6:]} {tuple(tensor.shape)}"
        return text + (f" root {root}" if root >= 0 else "") + (f" {extra}" if extra else "")

    @staticmethod
    def _as_bytes(tensor):
        return tensor.detach().contiguous().view(-1).view(torch.uint8) if tensor.numel() else \
            torch.empty(0, dtype=torch.uint8)

    @staticmethod
    def _from_bytes(data, like):
        if not like.numel():
            return like.new_empty(like.shape, device="cpu")
        if data.storage_offset() % like.element_size():
            data = data.clone()  # view(dtype) needs an offset aligned to the element size
        return data.view(like.dtype).view(like.shape)

    def _exact_reduce(self, name, tensor, op, root=-1):
        """Every rank's ``tensor`` reduced with ``op`` in rank order (a new CPU tensor), exact:
        raw bytes through the allgather, then the local reduction."""
        host = tensor.detach().to("cpu").contiguous()
        rows = self._gather_bytes(self._describe(name, tensor, op, root), self._as_bytes(host),
                                  size=host.numel() * host.element_size())
        acc = self._from_bytes(rows[0], host).clone()
        for row in rows[1:]:
            acc = _LOCAL[op](acc, self._from_bytes(row, host))
        if op == "AVG":
            acc = acc / self.comm.size
        return acc

    def _check_op(self, name, tensor, opts_op):
        """The op's name, or ValueError for what this backend cannot do exactly."""
        op = _op_name(opts_op)
        if op not in _LOCAL:
            raise ValueError(f"reduce op {op} is not supported by terse (SUM, AVG, "
                             f"PRODUCT, MIN, MAX, BAND, BOR, BXOR are)")
        if op == "AVG" and _integer(tensor.dtype):
            raise ValueError(f"AVG of {tensor.dtype} tensors is not defined (integer "
                             f"division would round); use SUM and divide")
        if op in ("BAND", "BOR", "BXOR") and not _integer(tensor.dtype):
            raise ValueError(f"{op} needs integer or bool tensors, not {tensor.dtype}")
        return op

    def _terse_reduces(self, tensor, op):
        """Whether terse's own reduction (and the group's codec) applies: float32, float16 and
        bfloat16 SUM/AVG."""
        return op in ("SUM", "AVG") and str(tensor.dtype) in _DTYPES

    # ---- collectives ---------------------------------------------------------------------------

    def allreduce(self, tensors, opts):
        name = "all_reduce"
        try:
            if len(tensors) != 1:
                raise ValueError(f"takes one tensor per process, not {len(tensors)}")
            tensor = tensors[0]
            op = self._check_op(name, tensor, opts.reduceOp)
        except (TypeError, ValueError) as error:
            self._refuse(name, error)

        def body():
            if self._terse_reduces(tensor, op):
                self._float_reduce("allreduce", tensor, None, op)
            else:
                tensor.copy_(self._exact_reduce(name, tensor, op))
            return tensors
        return self._queue(name, tensors, body)

    def allreduce_coalesced(self, tensors, opts):
        works = [self.allreduce([t], opts) for t in tensors]
        return self._queue("all_reduce_coalesced", tensors,
                           lambda: [w._done.result() for w in works] and tensors)

    def _reduce_scatter_flat(self, name, out, flat, op):
        """out = this rank's part of the reduction of flat (world * out.numel() elements)."""
        if self._terse_reduces(flat, op):
            self._float_reduce("reduce_scatter", flat, out, op)
            return
        reduced = self._exact_reduce(name, flat, op).view(-1)
        n = out.numel()
        out.copy_(reduced[self.comm.rank * n:(self.comm.rank + 1) * n].view(out.shape))

    def _reduce_scatter_base(self, output, input, opts):  # noqa: A002 -- c10d's names
        name = "reduce_scatter_tensor"
        try:
            op = self._check_op(name, input, opts.reduceOp)
            if input.numel() != output.numel() * self.comm.size or input.dtype != output.dtype:
                raise ValueError(f"the input must have the output's dtype and world size ("
                                 f"{self.comm.size}) times its {output.numel()} elements, not "
                                 f"{input.numel()} {input.dtype}")
        except (TypeError, ValueError) as error:
            self._refuse(name, error)

        def body():
            self._reduce_scatter_flat(name, output, input.contiguous().view(-1), op)
            return [output]
        return self._queue(name, [output], body)

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        name = "reduce_scatter"
        try:
            if len(output_tensors) != 1 or len(input_tensors) != 1 or \
                    len(input_tensors[0]) != self.comm.size:
                raise ValueError(f"takes one output and a list of {self.comm.size} inputs")
            out, ins = output_tensors[0], input_tensors[0]
            op = self._check_op(name, out, opts.reduceOp)
            if ins[self.comm.rank].numel() != out.numel():
                raise ValueError("this rank's input and its output differ in size")
        except (TypeError, ValueError) as error:
            self._refuse(name, error)

        def body():
            flat = torch.cat([t.detach().reshape(-1) for t in ins])
            sizes = [t.numel() for t in ins]
            if len(set(sizes)) == 1:
                self._reduce_scatter_flat(name, out, flat, op)
            else:  # uneven parts: the whole reduction, then this rank's slice
                if self._terse_reduces(flat, op):
                    self._float_reduce("allreduce", flat, None, op)
                    reduced = flat
                else:
                    reduced = self._exact_reduce(name, flat, op).view(-1)
                start = sum(sizes[:self.comm.rank])
                out.copy_(reduced[start:start + out.numel()].view(out.shape))
            return [out]
        return self._queue(name, [out], body)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002
        name = "all_gather_into_tensor"
        try:
            if output.numel() != input.numel() * self.comm.size or input.dtype != output.dtype:
                raise ValueError(f"the output must have the input's dtype and world size ("
                                 f"{self.comm.size}) times its {input.numel()} elements")
        except (TypeError, ValueError) as error:
            self._refuse(name, error)

        def body():
            if self._device_ok(input, output) or self._host_float_ok(input, output):
                # Straight into the output, exact (codec none copies float bits): the raw-bytes
                # path below copies the input twice (padded, behind its header) and the gathered
                # rows twice (joined, into the output), which made a 64 MiB all_gather on the
                # CPU 0.66x gloo's (docs/pytorch.md, "The backend against gloo").
                # A size that differs between ranks is caught by terse's own agreement.
                self._terse_call("allgather", ctypes.c_void_p(input.data_ptr()),
                                 ctypes.c_void_p(output.data_ptr()), output.numel(), input,
                                 _lib.SUM, "none", None)
                return [output]
            host = input.detach().to("cpu").contiguous()
            rows = self._gather_bytes(self._describe(name, input), self._as_bytes(host),
                                      size=host.numel() * host.element_size())
            whole = torch.cat(rows) if rows[0].numel() else torch.empty(0, dtype=torch.uint8)
            output.copy_(self._from_bytes(whole, output.detach().contiguous()))
            return [output]
        return self._queue(name, [output], body)

    def allgather(self, output_tensors, input_tensors, opts=None):
        name = "all_gather"
        try:
            if len(output_tensors) != 1 or len(input_tensors) != 1 or \
                    len(output_tensors[0]) != self.comm.size:
                raise ValueError(f"takes one input and a list of {self.comm.size} outputs")
            outs, tensor = output_tensors[0], input_tensors[0]
            if outs[self.comm.rank].numel() != tensor.numel():
                raise ValueError("this rank's output and its input differ in size")
        except (TypeError, ValueError) as error:
            self._refuse(name, error)

        def body():
            host = tensor.detach().to("cpu").contiguous()
            sizes = [o.numel() * o.element_size() for o in outs]
            # Each rank's input has its own size (uneven all_gather): the outputs' sizes are
            # what every rank shares.
            rows = self._gather_bytes(f"{name} {str(tensor.dtype)[6:]} {sizes}",
                                      self._as_bytes(host), size=max(sizes), lengths=sizes)
            for out, row, n in zip(outs, rows, sizes):
                out.copy_(self._from_bytes(row[:n], out.detach().contiguous()))
            return output_tensors
        return self._queue(name, outs, body)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._queue("all_gather_into_tensor_coalesced", outputs,
                           lambda: [w._done.result() for w in works] and outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return self._queue("reduce_scatter_tensor_coalesced", outputs,
                           lambda: [w._done.result() for w in works] and outputs)

    def broadcast(self, tensors, opts):
        name = "broadcast"
        tensor, root = tensors[0], opts.rootRank
        if len(tensors) != 1:
            self._refuse(name, ValueError(f"takes one tensor per process, not {len(tensors)}"))

        def body():
            # Raw bytes from the root (the others send zeros): exact, world times the bytes.
            host = tensor.detach().to("cpu").contiguous()
            data = self._as_bytes(host) if self.comm.rank == root else \
                torch.zeros(host.numel() * host.element_size(), dtype=torch.uint8)
            rows = self._gather_bytes(self._describe(name, tensor, root=root), data,
                                      size=data.numel())
            if self.comm.rank != root:
                tensor.copy_(self._from_bytes(rows[root], host))
            return tensors
        return self._queue(name, tensors, body)

    def reduce(self, tensors, opts):
        name = "reduce"
        try:
            tensor = tensors[0]
            op = self._check_op(name, tensor, opts.reduceOp)
            root = opts.rootRank
        except (TypeError, ValueError) as error:
            self._refuse(name, error)

        def body():
            if self._terse_reduces(tensor, op):
                work = tensor.detach().clone()
                self._float_reduce("allreduce", work, None, op)
            else:
                work = self._exact_reduce(name, tensor, op, root)
            if self.comm.rank == root:
                tensor.copy_(work)
            return tensors
        return self._queue(name, tensors, body)

    def barrier(self, opts=None):
        return self._queue("barrier", [], lambda: self.comm._locked(
            _lib.lib().terse_comm_barrier) or [])

    def gather(self, output_tensors, input_tensors, opts):
        name = "gather"
        tensor, root = input_tensors[0], opts.rootRank
        outs = output_tensors[0] if self.comm.rank == root and output_tensors else []
        if self.comm.rank == root and len(outs) != self.comm.size:
            self._refuse(name, ValueError(f"the root needs a list of {self.comm.size} outputs"))

        def body():
            host = tensor.detach().to("cpu").contiguous()
            rows = self._gather_bytes(self._describe(name, tensor, root=root),
                                      self._as_bytes(host),
                                      size=host.numel() * host.element_size())
            for out, row in zip(outs, rows):
                out.copy_(self._from_bytes(row, out.detach().contiguous()))
            return output_tensors
        return self._queue(name, outs, body)

    def scatter(self, output_tensors, input_tensors, opts):
        name = "scatter"
        out, root = output_tensors[0], opts.rootRank
        ins = input_tensors[0] if self.comm.rank == root and input_tensors else []
        if self.comm.rank == root and len(ins) != self.comm.size:
            self._refuse(name, ValueError(f"the root needs a list of {self.comm.size} inputs"))

        def body():
            n = out.numel() * out.element_size()
            if self.comm.rank == root:
                data = torch.cat([self._as_bytes(t.detach().to("cpu")) for t in ins])
                if data.numel() != n * self.comm.size:
                    self.comm._refused(RuntimeError(  # the others fail the call too
                        "terse: scatter: the root's inputs differ in size from the output"))()
            else:
                data = torch.zeros(n * self.comm.size, dtype=torch.uint8)
            rows = self._gather_bytes(self._describe(name, out, root=root), data, size=data.numel())
            mine = rows[root][self.comm.rank * n:(self.comm.rank + 1) * n]
            out.copy_(self._from_bytes(mine, out.detach().contiguous()))
            return output_tensors
        return self._queue(name, [out], body)

    def _all_to_all(self, name, send_parts, recv_parts):
        """send_parts[d]: the uint8 bytes for rank d; recv_parts[s]: the tensor to fill from
        rank s. Every rank's whole send buffer goes to everyone (world times the bytes), after a
        first exchange of the sizes. Each rank's sizes (sent to and expected from every rank)
        travel with its data, so every rank checks every pair and a mismatch fails everywhere."""
        world, me = self.comm.size, self.comm.rank
        sends = torch.tensor([p.numel() for p in send_parts], dtype=torch.int64)
        recvs = torch.tensor([o.numel() * o.element_size() for o in recv_parts],
                             dtype=torch.int64)
        data = torch.cat([sends.view(torch.uint8), recvs.view(torch.uint8)] + list(send_parts))
        rows = self._gather_bytes(f"{name} {world}", data)
        layout = [row[:16 * world].clone().view(torch.int64).view(2, world) for row in rows]
        wrong = [f"rank {s} sends {layout[s][0][d]} bytes to rank {d}, which expects "
                 f"{layout[d][1][s]}" for s in range(world) for d in range(world)
                 if layout[s][0][d] != layout[d][1][s]]
        if wrong:
            raise RuntimeError(f"terse: {name}: the ranks' split sizes disagree: "
                               f"{'; '.join(wrong[:4])}")
        for s, out in enumerate(recv_parts):
            sent = layout[s][0].tolist()
            start = 16 * world + sum(sent[:me])
            out.copy_(self._from_bytes(rows[s][start:start + sent[me]],
                                       out.detach().contiguous()))

    def alltoall_base(self, output, input,  # noqa: A002 -- c10d's names
                      output_split_sizes, input_split_sizes, opts):
        name = "all_to_all_single"
        world = self.comm.size

        def splits(sizes, tensor):
            if sizes:
                return list(sizes)
            if tensor.shape[0] % world:
                raise ValueError(f"dimension 0 ({tensor.shape[0]}) does not divide by {world}")
            return [tensor.shape[0] // world] * world
        try:
            ins = list(torch.split(input.detach().to("cpu").contiguous(),
                                   splits(input_split_sizes, input)))
            out_splits = splits(output_split_sizes, output)
        except (TypeError, ValueError, RuntimeError) as error:
            self._refuse(name, error)

        def body():
            host = torch.empty_like(output, device="cpu").contiguous()
            outs = list(torch.split(host, out_splits))
            self._all_to_all(name, [self._as_bytes(t) for t in ins], outs)
            output.copy_(host)
            return [output]
        return self._queue(name, [output], body)

    def alltoall(self, output_tensors, input_tensors, opts):
        name = "all_to_all"
        if len(output_tensors) != self.comm.size or len(input_tensors) != self.comm.size:
            self._refuse(name, ValueError(f"takes {self.comm.size} inputs and outputs"))

        def body():
            hosts = [torch.empty_like(o, device="cpu").contiguous() for o in output_tensors]
            self._all_to_all(name, [self._as_bytes(t.detach().to("cpu")) for t in input_tensors],
                             hosts)
            for o, h in zip(output_tensors, hosts):
                o.copy_(h)
            return output_tensors
        return self._queue(name, output_tensors, body)

    def gather_single(self, output, tensor, opts):
        name = "gather_single"
        root = opts.rootRank

        def body():
            host = tensor.detach().to("cpu").contiguous()
            rows = self._gather_bytes(self._describe(name, tensor, root=root),
                                      self._as_bytes(host),
                                      size=host.numel() * host.element_size())
            if self.comm.rank == root:
                whole = torch.cat(rows)
                if whole.numel() != output.numel() * output.element_size():
                    raise RuntimeError(f"terse: {name}: the output holds {output.numel()} "
                                       f"elements, the ranks sent {whole.numel()} bytes")
                output.copy_(self._from_bytes(whole, output.detach().contiguous()))
            return [output]
        return self._queue(name, [output], body)

    # torch 2.15's names of the single-tensor forms (dist.all_gather_into_tensor and friends).
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def _p2p(self, name):
        raise RuntimeError(f"terse: {name}: terse has no point-to-point operations (its API has "
                           f"allreduce, reduce-scatter, allgather, barrier and split); make a gloo "
                           f"or nccl group for send/recv (e.g. init_process_group("
                           f"\"cpu:terse,cuda:nccl\") or dist.new_group(backend=\"gloo\"))")

    def send(self, tensors, dst, tag):
        self._p2p("send")

    def recv(self, tensors, src, tag):
        self._p2p("recv")

    def recv_anysource(self, tensors, tag):
        self._p2p("recv")


# ---- Registration ------------------------------------------------------------------------------

def init_process_group(backend=NAME, **kwargs):
    """``dist.init_process_group(backend, **kwargs)`` that also starts under terse-run (or any
    launcher that sets only TERSE_RANK / TERSE_WORLD_SIZE / TERSE_STORE): where neither kwargs
    nor torch's environment (MASTER_ADDR) name a store, rank and world size come from terse's
    variables and torch's store from TERSE_STORE: for a directory, a file store in it
    ("torch-store"); for host:port, torch's TCP store on host:port+1 (the port itself is terse's
    own store, which terse.ddp's and the optimizers' process-wide communicator serves, as
    torchrun's MASTER_PORT is torch's and MASTER_PORT+1 terse's). Under torchrun it is
    init_process_group itself."""
    if "init_method" not in kwargs and "store" not in kwargs and "MASTER_ADDR" not in os.environ:
        store = os.environ.get("TERSE_STORE", "")
        if store:
            kwargs.setdefault("rank", int(os.environ.get("TERSE_RANK", "0")))
            kwargs.setdefault("world_size", int(os.environ.get("TERSE_WORLD_SIZE", "1")))
            host, _, port = store.rpartition(":")
            if host and port.isdigit():
                kwargs["init_method"] = f"tcp://{host}:{int(port) + 1}"
            else:
                kwargs["init_method"] = "file://" + os.path.join(store, "torch-store")
    dist.init_process_group(backend, **kwargs)


def _create(dist_opts, backend_options):
    """c10d's creator (extended_api): called on the members of a group only, with the group's
    store (already under a prefix of the group's own), rank and size."""
    if backend_options is None:
        options = getattr(_pending, "options", None) or Options()
    elif isinstance(backend_options, Options):
        options = backend_options
    else:
        raise TypeError(f"terse: pg_options must be a terse.backend.Options, not "
                        f"{type(backend_options).__name__}")
    timeout = dist_opts.timeout
    timeout_ms = int(timeout.total_seconds() * 1000) if timeout else 0
    comm = Communicator.over_store(dist_opts.group_rank, dist_opts.group_size, dist_opts.store,
                                   scope="terse", timeout_ms=timeout_ms)
    return TerseBackend(comm, options, str(dist_opts.group_id))


if NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu", "cuda"])
