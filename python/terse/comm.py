"""The communicator and error-feedback state of the C API, as Python objects.

Tensors are anything with torch's tensor interface (``data_ptr()``, ``numel()``, ``dtype``,
``is_contiguous()``, ``device``); this module does not import torch itself, so the communicator
is usable (and testable) without it.
"""
import concurrent.futures
import ctypes
import functools
import struct
import threading

from . import _lib
from ._lib import check

_DTYPES = {"torch.float32": _lib.FLOAT32, "torch.float16": _lib.FLOAT16,
           "torch.bfloat16": _lib.BFLOAT16}
_OPS = {"sum": _lib.SUM, "avg": _lib.AVG}
_ALGORITHMS = ("auto", "flat", "twolevel")


class _CallOptions(ctypes.Structure):
    """terse_call_options_t (terse.h)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("codec", ctypes.c_char_p),
                ("feedback", ctypes.c_void_p), ("algorithm", ctypes.c_char_p)]


def _codec_bytes(codec):
    """The spec as the C string terse_* takes, or ValueError/TypeError for what C would misread:
    a NUL would end the string early ("int8\\x00garbage" was taken as "int8")."""
    if codec is None:
        return b"none"
    if not isinstance(codec, str):
        raise TypeError(f"codec must be a spec string such as 'onebit' or 'topk:ratio=0.01', "
                        f"not {type(codec).__name__}")
    if "\x00" in codec:
        raise ValueError(f"terse: codec spec {codec!r} contains a NUL character")
    return codec.encode()


# The largest value a C size_t holds: a bigger Python int would be wrapped silently by ctypes
# (2**64 became 0 and 2**64+5 became 5).
_SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1


def _count(value, what="count"):
    """value as an element count for a size_t parameter, or a clear error before ctypes sees it.
    bool is an int subclass but never a count (Feedback("onebit", True) once made 1 element)."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"terse: {what} must be an int, not {type(value).__name__}")
    value = value.__index__()
    if value < 0 or value > _SIZE_MAX:
        raise ValueError(f"terse: {what} must be between 0 and {_SIZE_MAX}, not {value}")
    return value


def _host_buffer(tensor, what):
    """(pointer, count, terse dtype) of a contiguous CPU tensor, or a clear error."""
    name = str(getattr(tensor, "dtype", type(tensor).__name__))
    if name not in _DTYPES:
        raise TypeError(f"terse: {what} has dtype {name}; terse reduces float32, float16 and "
                        f"bfloat16 tensors")
    device = getattr(tensor, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        raise ValueError(f"terse: {what} is on {device}; the C API takes host memory (copy it to "
                         f"the CPU first, as terse.ddp's hook does for CUDA buckets)")
    if not tensor.is_contiguous():
        raise ValueError(f"terse: {what} is not contiguous")
    return ctypes.c_void_p(tensor.data_ptr()), tensor.numel(), _DTYPES[name]


class Communicator(_lib.Handle):
    """This process's terse communicator (``terse_comm_create``).

    Rank, world size and the rendezvous store come from the launcher's environment: terse's own
    TERSE_RANK / TERSE_WORLD_SIZE / TERSE_STORE, or mpirun's, srun's or torchrun's variables.
    Under torchrun terse's store listens on MASTER_PORT+1, beside PyTorch's on MASTER_PORT
    (docs/env.md). Creation is collective: it blocks until every rank has arrived or
    TERSE_TIMEOUT_MS passed.

    One thread at a time may call into a communicator; this object serialises its own calls with
    a lock so that hooks running on autograd threads cannot interleave. ``allreduce_async``
    queues calls to one background thread of this communicator; once it has, every later call
    (blocking ones included) goes through that queue, so collectives start in the order this
    process issued them, which every rank must share.
    """

    _destroy = "terse_comm_destroy"
    _what = "the communicator"

    def __init__(self, _shrunk_from=None, _exclude=()):
        if _shrunk_from is None:
            self._create(_lib.lib().terse_comm_create)
        else:
            _lib.require(("terse_comm_shrink",), "Communicator.shrink")
            ranks = (ctypes.c_int * max(len(_exclude), 1))(*_exclude)
            self._create(_lib.lib().terse_comm_shrink, _shrunk_from, ranks, len(_exclude))
        self._describe()

    @classmethod
    def over_store(cls, rank, size, store, scope="comm", timeout_ms=0):
        """A communicator of ``size`` ranks in which this process is ``rank``, meeting the others
        through ``store`` (``terse_comm_create_with_store``) instead of TERSE_STORE: anything with
        torch's c10d Store methods ``set(key, bytes)``, ``get(key)``, ``check([key])`` and
        ``add(key, n)``. This module does not import torch; terse.backend hands c10d's store of
        each process group here. ``scope`` keeps communicators that share the store apart (every
        rank of one passes the same); ``timeout_ms`` <= 0 takes TERSE_TIMEOUT_MS. Collective over
        the ``size`` ranks."""
        for what, value in (("rank", rank), ("size", size)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"terse: {what} must be an int, not {type(value).__name__}")
        ops = _StoreOps(store)
        self = cls.__new__(cls)
        try:
            self._create(_lib.require(["terse_comm_create_with_store"], "Communicator.over_store")
                         .terse_comm_create_with_store, rank, size, ctypes.byref(ops.struct),
                         scope.encode() if scope else None, int(timeout_ms))
        except _lib.TerseError as error:
            if ops.error is not None:
                raise error from ops.error  # the store's own exception says what went wrong
            raise
        self._describe()
        return self

    def _describe(self):
        l = _lib.lib()
        handle = self._handle
        self._lock = threading.Lock()
        self._queue = None   # concurrent.futures executor of one thread, made by allreduce_async
        self._queue_lock = threading.Lock()
        self._worker = None  # the queue thread's ident, once it ran something
        self.rank = l.terse_comm_rank(handle)
        self.size = l.terse_comm_size(handle)
        # The two levels (docs/api.md): this rank's place among its node's ranks, from every
        # rank's TERSE_NODE or host, checked against torchrun's LOCAL_WORLD_SIZE.
        self.local_rank = l.terse_comm_local_rank(handle)
        self.local_size = l.terse_comm_local_size(handle)
        self.node = l.terse_comm_node(handle)
        self.node_count = l.terse_comm_node_count(handle)
        # (rank, size) in the communicator shrink() made this one from (None otherwise): the
        # defaults of relayout_feedback.
        self.shrunk_from = None

    def close(self):
        """Finishes queued collectives and closes the connections (collective in practice: peers
        still talking to this rank get errors)."""
        queue = getattr(self, "_queue", None)
        if queue is not None:
            # From the queue's own thread (the last reference dropped there) it cannot be joined;
            # the calls queued before this one have run by then.
            queue.shutdown(wait=threading.get_ident() != self._worker)
            self._queue = None
        self._free()

    def __repr__(self):
        state = "closed" if self._handle is None else f"rank {self.rank} of {self.size}"
        return f"<terse.Communicator {state}>"

    def _in_order(self, call):
        """Runs call() now, or behind the queued asynchronous calls when there are any."""
        if self._queue is None or threading.get_ident() == self._worker:
            return call()   # nothing queued, or called from the queue's thread (a callback)
        return self._submit(call).result()

    def _submit(self, call):
        def run():
            self._worker = threading.get_ident()
            return call()
        with self._queue_lock:
            if self._queue is None:
                self._queue = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="terse-comm")
            return self._queue.submit(run)

    def wait(self):
        """Returns once every collective queued by allreduce_async has finished (their errors
        stay in their futures)."""
        if self._queue is not None and threading.get_ident() != self._worker:
            self._submit(lambda: None).result()

    def _locked(self, call):
        """Runs call(handle) behind the queued asynchronous calls, holding this communicator's
        lock, and raises TerseError when the status it returns is a failure: the way every
        blocking terse_* call on this communicator runs (its handle is read then, so a
        communicator closed meanwhile is refused)."""
        def run():
            with self._lock:
                check(call(self._h()))
        self._in_order(run)

    def barrier(self):
        self._locked(_lib.lib().terse_comm_barrier)

    def shrink(self, exclude=()):
        """After a failure (or on request: ``exclude`` lists live ranks to leave out), a new
        Communicator of the ranks still running, renumbered densely in this one's order
        (``terse_comm_shrink``; docs/reliability.md, "Shrinking after a failure"). Every survivor
        calls it with the same ``exclude``; a rank left out gets a TerseError. This communicator
        stays as it is: close it. Needs a store that outlives the dead ranks (TERSE_STORE set to
        a directory; the TCP store served by rank 0 ends with rank 0)."""
        exclude = [int(r) for r in exclude]
        shrunk = []

        def run():
            with self._lock:
                shrunk.append(Communicator(_shrunk_from=self._h(), _exclude=exclude))
        self._in_order(run)
        shrunk[0].shrunk_from = (self.rank, self.size)
        return shrunk[0]

    def relayout_feedback(self, feedbacks, old_rank=None, old_world=None):
        """After shrink(), on the new communicator: lays out this survivor's Feedback states
        (made for allreduce or reduce_scatter over the old world) for this world, in one
        exchange (``terse_feedback_relayout``; docs/reliability.md, "Residuals after a shrink").
        Every survivor calls it with its states in the same order (codec and count alike per
        position). Each state's worker residual stays (this process's own gradient's); the
        server residuals of the old chunks are gathered, the dead ranks' chunks being zero, and
        each survivor keeps the chunk it owns in this world's allreduce. old_rank and old_world
        default to this process's rank and the world size in the communicator shrink() was
        called on. A state an allgather used, states that differ between survivors or a bad old
        rank raise TerseError ('invalid argument') on every survivor alike, and no state
        changes."""
        if old_rank is None or old_world is None:
            if self.shrunk_from is None:
                raise ValueError("terse: relayout_feedback needs old_rank and old_world on a "
                                 "communicator that shrink() did not make")
            old_rank = self.shrunk_from[0] if old_rank is None else old_rank
            old_world = self.shrunk_from[1] if old_world is None else old_world
        for what, value in (("old_rank", old_rank), ("old_world", old_world)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"terse: {what} must be an int, not {type(value).__name__}")
        feedbacks = list(feedbacks)
        for fb in feedbacks:
            if not isinstance(fb, Feedback):
                raise TypeError(f"terse: relayout_feedback takes Feedback states, not "
                                f"{type(fb).__name__}")
        relayout = _lib.require(("terse_feedback_relayout",),
                                "Communicator.relayout_feedback").terse_feedback_relayout

        def run():
            with self._lock:
                # Handles are read here, under the lock, so a state closed meanwhile is refused.
                handles = (ctypes.c_void_p * max(len(feedbacks), 1))(
                    *[fb._h() for fb in feedbacks])
                check(relayout(self._h(), old_rank, old_world, handles, len(feedbacks)))
        self._in_order(run)

    def abort(self, reason=None):
        """Fails every pending and later call of this rank (any thread may call it)."""
        _lib.lib().terse_comm_abort(self._h(), reason.encode() if reason else None)

    def part(self, count):
        """(offset, length) of this rank's part of a count-element reduce-scatter/allgather."""
        count = _count(count)
        off, length = ctypes.c_size_t(), ctypes.c_size_t()
        _lib.lib().terse_comm_part(self._h(), count, ctypes.byref(off), ctypes.byref(length))
        return off.value, length.value

    def _refused(self, error):
        """The call that stands in for a collective whose arguments this module refused: it
        still takes the collective's place in the ranks' sequence (terse_comm_reject), so the
        other ranks fail their matching call at once instead of pairing it with this rank's next
        one, which would give both a wrong result. It raises the refusal itself."""
        def call():
            with self._lock:
                _lib.lib().terse_comm_reject(self._h(), str(error).encode(errors="replace"))
            raise error
        return call

    def _allreduce_call(self, tensor, codec, op, feedback, out, algorithm):
        """Checks allreduce's arguments and returns the call that runs it (or, when they are
        invalid, the call that refuses it on every rank)."""
        self._h()
        try:
            return self._checked_allreduce_call(tensor, codec, op, feedback, out, algorithm)
        except (TypeError, ValueError) as error:
            return self._refused(error)

    def _checked_allreduce_call(self, tensor, codec, op, feedback, out, algorithm):
        if op not in _OPS:
            raise ValueError(f"terse: op must be 'avg' or 'sum', not {op!r}")
        if algorithm not in _ALGORITHMS:
            raise ValueError(f"terse: algorithm must be one of {', '.join(_ALGORITHMS)}, not "
                             f"{algorithm!r}")
        if algorithm != "auto" and not _lib.has("terse_allreduce_ex"):
            raise ValueError(f"terse: algorithm={algorithm!r} needs terse_allreduce_ex, which the "
                             f"loaded libterse does not have (an older build)")
        send, count, dtype = _host_buffer(tensor, "the tensor")
        recv = send
        if out is not None:
            recv, out_count, out_dtype = _host_buffer(out, "out")
            if out_count != count or out_dtype != dtype:
                raise ValueError("terse: out must have the tensor's element count and dtype")
        spec = _codec_bytes(codec)
        if feedback is not None:
            feedback._h()  # a closed Feedback is refused here, before the call is queued

        def call():
            # The closure holds tensor, out and feedback, so a queued call keeps them alive: the
            # feedback's handle is taken here, from the object, never from a copy of the handle
            # made outside (a Feedback collected while its call is queued frees its state).
            fb = feedback._h() if feedback is not None else None
            with self._lock:
                if algorithm == "auto":
                    check(_lib.lib().terse_allreduce(self._h(), send, recv, count, dtype,
                                                     _OPS[op], spec, fb))
                else:
                    # Sized by this module's struct, never by the library's: a library with
                    # appended fields must not write past it.
                    opts = _CallOptions(struct_size=ctypes.sizeof(_CallOptions))
                    opts.codec, opts.feedback, opts.algorithm = spec, fb, algorithm.encode()
                    check(_lib.lib().terse_allreduce_ex(self._h(), send, recv, count, dtype,
                                                        _OPS[op], ctypes.byref(opts), None))
            return tensor if out is None else out
        return call

    def allreduce(self, tensor, codec="none", op="avg", feedback=None, out=None,
                  algorithm="auto"):
        """Allreduces a contiguous CPU tensor in place (or into ``out``) with ``codec``.

        op is "avg" (divides by the world size in float32 before any narrowing) or "sum".
        feedback is a Feedback made for this codec and element count, or None. algorithm is
        "auto" (TERSE_ALGO, else the faster of two-level and flat as measured, where the
        node layout allows two-level), "flat" or
        "twolevel" (docs/api.md, "Algorithms"); every rank must pass the same, and "twolevel"
        where it cannot run fails on every rank. Returns the tensor that holds the result.
        """
        return self._in_order(self._allreduce_call(tensor, codec, op, feedback, out, algorithm))

    def allreduce_async(self, tensor, codec="none", op="avg", feedback=None, out=None,
                        algorithm="auto"):
        """allreduce on this communicator's background thread: returns at once with a
        concurrent.futures.Future of the result tensor (its exception a TerseError when the
        collective fails). Arguments are checked here, before queueing: invalid ones raise
        TypeError or ValueError at once, and the refusal is queued in the call's place so that
        the other ranks fail the same call. The tensor, ``out`` and the feedback must stay alive
        and untouched until the future is done; calls run one at a time in the order they were
        made (ctypes releases the GIL while terse works, so Python code such as autograd's
        backward goes on meanwhile)."""
        self._h()
        try:
            call = self._checked_allreduce_call(tensor, codec, op, feedback, out, algorithm)
        except (TypeError, ValueError) as error:
            self._submit(self._refused(error))
            raise
        return self._submit(call)

    # ---- reduce-scatter and allgather (terse.fsdp's comms) ------------------------------------

    def _sharded_call(self, kind, send, recv, codec, op, feedback):
        """Checks a reduce-scatter's or allgather's arguments and returns the call that runs it
        (or the call that refuses it on every rank). The full tensor is ``send`` for
        reduce-scatter and ``recv`` for allgather; the other holds this rank's part
        (``part(count)``: the first count % size ranks get one element more)."""
        self._h()
        try:
            if op not in _OPS:
                raise ValueError(f"terse: op must be 'avg' or 'sum', not {op!r}")
            full, shard = (send, recv) if kind == "reduce_scatter" else (recv, send)
            full_ptr, count, dtype = _host_buffer(full, "the full tensor")
            shard_ptr, shard_count, shard_dtype = _host_buffer(shard, "this rank's part")
            if shard_dtype != dtype:
                raise ValueError("terse: the full tensor and this rank's part differ in dtype")
            _, length = self.part(count)
            if shard_count != length:
                raise ValueError(f"terse: this rank's part of {count} elements has {length}, "
                                 f"not {shard_count}")
            spec = _codec_bytes(codec)
            if feedback is not None:
                feedback._h()
        except (TypeError, ValueError) as error:
            return self._refused(error)

        def call():
            fb = feedback._h() if feedback is not None else None
            with self._lock:
                if kind == "reduce_scatter":
                    check(_lib.lib().terse_reduce_scatter(self._h(), full_ptr, shard_ptr, count,
                                                          dtype, _OPS[op], spec, fb))
                else:
                    check(_lib.lib().terse_allgather(self._h(), shard_ptr, full_ptr, count, dtype,
                                                     spec, fb))
            return recv
        return call

    def reduce_scatter(self, tensor, out, codec="none", op="avg", feedback=None):
        """Reduces the contiguous CPU ``tensor`` (count elements, every rank alike) over the
        ranks with ``codec`` and writes this rank's part (``part(count)``) into ``out``.
        feedback: a Feedback made for this codec and the whole count, or None. Returns out."""
        return self._in_order(self._sharded_call("reduce_scatter", tensor, out, codec, op,
                                                 feedback))

    def allgather(self, part, out, codec="none", feedback=None):
        """Gathers every rank's ``part`` into ``out`` (count elements, rank r's part at
        ``part(count)`` of r), compressed with ``codec``: with a lossy codec every rank's copy,
        this rank's own part included, holds the decoded values, so all ranks end alike.
        ``part`` may be the view of ``out`` at this rank's offset (in place). Returns out."""
        return self._in_order(self._sharded_call("allgather", part, out, codec, "avg",
                                                 feedback))


_STORE_SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                              ctypes.c_size_t)
_STORE_GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
                              ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_void_p),
                              ctypes.POINTER(ctypes.c_size_t))
_STORE_CLAIM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p,
                                ctypes.c_size_t, ctypes.POINTER(ctypes.c_int),
                                ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))


class _StoreOpsStruct(ctypes.Structure):
    """terse_store_ops_t (terse.h)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("user", ctypes.c_void_p),
                ("set", _STORE_SET), ("get", _STORE_GET), ("set_if_absent", _STORE_CLAIM)]


class _StoreOps:
    """A c10d-like store behind terse_store_ops_t. The callbacks keep the last value they handed
    to C alive until the next call (the contract in terse.h), and remember the first exception
    the store raised, which the failed creation then names."""

    def __init__(self, store):
        self.store = store
        self.error = None
        self._last = None
        self.struct = _StoreOpsStruct(struct_size=ctypes.sizeof(_StoreOpsStruct),
                                      set=_STORE_SET(self._set), get=_STORE_GET(self._get),
                                      set_if_absent=_STORE_CLAIM(self._claim))

    def _hand_back(self, data, value, size):
        self._last = ctypes.create_string_buffer(bytes(data), max(len(data), 1))
        value[0] = ctypes.cast(self._last, ctypes.c_void_p).value
        size[0] = len(data)

    def _guarded(self, body):
        try:
            body()
            return 0
        except BaseException as error:  # noqa: BLE001 -- must not unwind through C
            if self.error is None:
                self.error = error
            return 1

    def _set(self, _user, key, value, size):
        return self._guarded(lambda: self.store.set(key.decode(), ctypes.string_at(value, size)))

    def _get(self, _user, key, found, value, size):
        def body():
            name = key.decode()
            found[0] = 1 if self.store.check([name]) else 0
            if found[0]:
                self._hand_back(self.store.get(name), value, size)
        return self._guarded(body)

    def _claim(self, _user, key, value, size, found, existing, existing_size):
        # c10d's compare_set cannot tell "I set it" from "it held the same value", so the claim is
        # a counter: the first to add() writes the value, the others read it (get waits for it).
        def body():
            name = key.decode()
            if self.store.add(name + "/claim", 1) == 1:
                found[0] = 0
                self.store.set(name, ctypes.string_at(value, size))
            else:
                found[0] = 1
                self._hand_back(self.store.get(name), existing, existing_size)
        return self._guarded(body)


_HEADER = struct.Struct("<IIIiQQQ")  # docs/wire-format.md, "Error-feedback checkpoint"
_MAGIC = 0x46455254


def parse_feedback_header(data):
    """The header fields of a serialized Feedback as a dict (docs/wire-format.md): spec, count,
    server_world, server_offset, server_length. Raises ValueError for bytes that are not one."""
    if len(data) < _HEADER.size:
        raise ValueError(f"terse: {len(data)} bytes are too few for an error-feedback checkpoint")
    magic, version, spec_len, world, count, off, length = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC:
        raise ValueError("terse: not an error-feedback checkpoint (bad magic)")
    if version != 1:
        raise ValueError(f"terse: error-feedback checkpoint version {version}; this package "
                         f"reads version 1")
    if spec_len > 256 or _HEADER.size + spec_len > len(data):
        raise ValueError("terse: error-feedback checkpoint header is damaged")
    spec = bytes(data[_HEADER.size:_HEADER.size + spec_len]).decode(errors="replace")
    return {"spec": spec, "count": count, "server_world": world, "server_offset": off,
            "server_length": length}


@functools.lru_cache(maxsize=64)
def codec_info(codec):
    """(canonical spec, wants error feedback) of a codec spec, from the library itself
    (``terse_codec_info``): "topk" -> ("topk:ratio=0.01", True), "auto" -> ("auto:max=int8",
    False). Raises TerseError naming what is accepted for a bad spec."""
    spec = _codec_bytes(codec)
    size = ctypes.c_size_t(0)
    wants = ctypes.c_int(0)
    _lib.check(_lib.lib().terse_codec_info(spec, None, ctypes.byref(size), ctypes.byref(wants)))
    buf = ctypes.create_string_buffer(size.value)
    _lib.check(_lib.lib().terse_codec_info(spec, buf, ctypes.byref(size), None))
    return buf.value.decode(), bool(wants.value)


def canonical_spec(codec):
    """The codec's spec with every parameter spelled out ("topk" -> "topk:ratio=0.01"); raises
    TerseError naming what is accepted for a bad spec."""
    return codec_info(codec)[0]


class Feedback(_lib.Handle):
    """Error-feedback residuals of one tensor (``terse_feedback_*``): what compression left out,
    added back before the next compression. Made for one codec and one element count."""

    _destroy = "terse_feedback_destroy"
    _what = "the feedback state"

    def __init__(self, codec, count):
        count = _count(count)
        self._create(_lib.lib().terse_feedback_create, _codec_bytes(codec), count)
        self.count = count

    @classmethod
    def from_bytes(cls, data):
        """A Feedback from ``to_bytes()``'s output; the bytes are validated (TerseError with
        status 'corrupt' when they are damaged)."""
        data = bytes(data)
        fb = cls.__new__(cls)
        fb._create(_lib.lib().terse_feedback_deserialize, data, len(data))
        size, count = ctypes.c_size_t(0), ctypes.c_size_t(0)
        check(_lib.lib().terse_feedback_info(fb._h(), None, ctypes.byref(size),
                                             ctypes.byref(count)))
        fb.count = count.value
        return fb

    def to_bytes(self):
        """The versioned checkpoint form (docs/wire-format.md)."""
        return _lib.serialized(_lib.lib().terse_feedback_serialize, self._h())

    def reset(self):
        """Zeroes the residuals (e.g. after a step a loss scaler skipped)."""
        _lib.lib().terse_feedback_reset(self._h())

    def worker(self):
        """The worker residual, ``count`` float32 values, as a writable memoryview of the
        state's own memory (``terse_feedback_worker``): valid until the state next runs a
        collective, is reset, loaded or closed."""
        ptr = ctypes.POINTER(ctypes.c_float)()
        check(_lib.lib().terse_feedback_worker(self._h(), ctypes.byref(ptr)))
        if self.count == 0:
            return memoryview(bytearray()).cast("f")
        array = (ctypes.c_float * self.count).from_address(ctypes.addressof(ptr.contents))
        return memoryview(array).cast("B").cast("f")
