"""Loads libterse.so and declares the C API's signatures (include/terse/terse.h).

ctypes rather than a compiled extension: the package stays pure Python (``pip install ./python``
needs no compiler and no torch headers), and a call costs a few microseconds, which is nothing
beside an allreduce of a gradient bucket (docs/pytorch.md has the measurement). ctypes releases
the GIL for the duration of each call, so a blocking allreduce does not stall other Python threads.
"""
import ctypes
import os
import threading

# terse_status_t (include/terse/types.h)
OK = 0
INVALID_ARGUMENT = 1
IN_PROGRESS = 9

# terse_dtype_t and terse_redop_t
FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2
SUM, AVG = 0, 1

_SONAME = "libterse.so.0"


class TerseError(RuntimeError):
    """A terse_* call failed. ``status`` is the terse_status_t code, ``status_name`` its name."""

    def __init__(self, status, status_name, message):
        self.status = status
        self.status_name = status_name
        super().__init__(f"terse: {status_name}: {message}" if message else f"terse: {status_name}")


def _candidates():
    """Where libterse.so may be, in the order tried (docs/pytorch.md, "Finding libterse.so")."""
    explicit = os.environ.get("TERSE_LIBRARY", "")
    if explicit:
        # An explicit choice is the only one tried: silently loading another build would hide
        # a typo and test the wrong library.
        return [explicit]
    found = []
    # Installed with pip (python/pyproject.toml): the package carries its own build.
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "libterse.so")
    if os.path.exists(packaged):
        found.append(packaged)
    # Imported from the source tree (PYTHONPATH=python): the checkout's default build directory.
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    in_tree = os.path.join(checkout, "build", "lib", "libterse.so")
    if os.path.exists(os.path.join(checkout, "include", "terse", "terse.h")):
        found.append(in_tree)
    found.append(_SONAME)  # the dynamic loader: LD_LIBRARY_PATH, rpath, ldconfig's cache
    for prefix in ("/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib64"):
        found.append(os.path.join(prefix, _SONAME))
    return found


# ---- The C API's signatures (include/terse/terse.h) --------------------------------------------
# Every terse_* function this package calls, declared here and nowhere else: (name, return type,
# argument types). ctypes converts by these, so an argument of the wrong kind is a TypeError at
# the call instead of a value the C side misreads. tests/api/python_args_test.py (Python.Args)
# checks each line against the header's declaration.
#
# _ptr (c_void_p): an opaque handle, a buffer or an options struct; _ptrs and _sizes: a pointer
# to handles or sizes, which the C side writes through (an out parameter) or reads (an array).
# The enums (terse_status_t, terse_dtype_t, terse_redop_t) are int-sized (include/terse/types.h).
_c = ctypes
_ptr, _size, _int, _text, _i64 = _c.c_void_p, _c.c_size_t, _c.c_int, _c.c_char_p, _c.c_int64
_ptrs, _sizes = _c.POINTER(_c.c_void_p), _c.POINTER(_c.c_size_t)
_status, _dtype, _op = _c.c_int, _c.c_int, _c.c_int

# In every libterse.so this package loads: a library without one of them is not terse's C API.
_SIGNATURES = (
    ("terse_last_error", _text, ()),
    ("terse_status_name", _text, (_status,)),
    ("terse_version", _text, ()),
    ("terse_comm_create", _status, (_ptrs,)),
    ("terse_comm_destroy", None, (_ptr,)),
    ("terse_comm_rank", _int, (_ptr,)),
    ("terse_comm_size", _int, (_ptr,)),
    ("terse_comm_local_rank", _int, (_ptr,)),
    ("terse_comm_local_size", _int, (_ptr,)),
    ("terse_comm_node", _int, (_ptr,)),
    ("terse_comm_node_count", _int, (_ptr,)),
    ("terse_comm_barrier", _status, (_ptr,)),
    ("terse_comm_abort", None, (_ptr, _text)),
    ("terse_comm_reject", _status, (_ptr, _text)),
    ("terse_comm_part", None, (_ptr, _size, _sizes, _sizes)),
    ("terse_allreduce", _status,
     (_ptr, _ptr, _ptr, _size, _dtype, _op, _text, _ptr)),
    ("terse_reduce_scatter", _status,
     (_ptr, _ptr, _ptr, _size, _dtype, _op, _text, _ptr)),
    ("terse_allgather", _status, (_ptr, _ptr, _ptr, _size, _dtype, _text, _ptr)),
    ("terse_allreduce_async", _status,
     (_ptr, _ptr, _ptr, _size, _dtype, _op, _text, _ptr, _ptrs)),
    ("terse_reduce_scatter_async", _status,
     (_ptr, _ptr, _ptr, _size, _dtype, _op, _text, _ptr, _ptrs)),
    ("terse_allgather_async", _status,
     (_ptr, _ptr, _ptr, _size, _dtype, _text, _ptr, _ptrs)),
    ("terse_codec_info", _status, (_text, _text, _sizes, _c.POINTER(_int))),
    ("terse_work_test", _status, (_ptr,)),
    ("terse_work_wait", _status, (_ptr,)),
    ("terse_work_free", None, (_ptr,)),
    ("terse_feedback_create", _status, (_text, _size, _ptrs)),
    ("terse_feedback_destroy", None, (_ptr,)),
    ("terse_feedback_info", _status, (_ptr, _text, _sizes, _sizes)),
    ("terse_feedback_reset", None, (_ptr,)),
    ("terse_feedback_worker", _status, (_ptr, _c.POINTER(_c.POINTER(_c.c_float)))),
    ("terse_feedback_serialize", _status, (_ptr, _ptr, _sizes)),
    ("terse_feedback_deserialize", _status, (_ptr, _size, _ptrs)),
)

# Newer than the first release: declared where the library has them, so an older libterse.so
# still loads for everything else; require() names what a feature needs and the library lacks.
_NEWER_SIGNATURES = (
    ("terse_cuda_info", None, (_c.POINTER(_int), _c.POINTER(_int))),
    ("terse_comm_create_with_store", _status, (_int, _int, _ptr, _text, _i64, _ptrs)),
    ("terse_comm_shrink", _status, (_ptr, _c.POINTER(_int), _int, _ptrs)),
    ("terse_feedback_relayout", _status, (_ptr, _int, _int, _ptrs, _size)),
    ("terse_allreduce_ex", _status,
     (_ptr, _ptr, _ptr, _size, _dtype, _op, _ptr, _ptrs)),
    ("terse_onebit_adam_create", _status, (_size, _ptr, _ptrs)),
    ("terse_onebit_adam_destroy", None, (_ptr,)),
    ("terse_onebit_adam_step", _status, (_ptr, _ptr, _ptr, _ptr, _c.c_float)),
    ("terse_onebit_adam_reset_residuals", None, (_ptr,)),
    ("terse_onebit_adam_steps", _i64, (_ptr,)),
    ("terse_onebit_adam_frozen_at", _i64, (_ptr,)),
    ("terse_onebit_adam_serialize", _status, (_ptr, _ptr, _sizes)),
    ("terse_onebit_adam_deserialize", _status, (_ptr, _size, _ptrs)),
    ("terse_onebit_adam_shrink", _status, (_ptr, _ptr)),
    ("terse_sharded_onebit_adam_create", _status, (_size, _int, _int, _ptr, _ptrs)),
    ("terse_sharded_onebit_adam_destroy", None, (_ptr,)),
    ("terse_sharded_onebit_adam_step", _status,
     (_ptr, _ptr, _ptr, _ptr, _c.c_float)),
    ("terse_sharded_onebit_adam_reduce", _status, (_ptr, _ptr, _ptr, _ptr)),
    ("terse_sharded_onebit_adam_update", _status,
     (_ptr, _ptr, _ptr, _ptr, _c.c_float)),
    ("terse_sharded_onebit_adam_steps", _i64, (_ptr,)),
    ("terse_sharded_onebit_adam_frozen_at", _i64, (_ptr,)),
    ("terse_sharded_onebit_adam_shard", _status, (_ptr, _sizes, _sizes)),
    ("terse_sharded_onebit_adam_state_bytes", _size, (_ptr,)),
    ("terse_sharded_onebit_adam_set_buddy_copy", _status, (_ptr, _int)),
    ("terse_sharded_onebit_adam_buddy_bytes", _size, (_ptr,)),
    ("terse_sharded_onebit_adam_shrink", _status, (_ptr, _ptr, _ptrs, _sizes, _size)),
    ("terse_sharded_onebit_adam_shrink_parts", _status, (_ptr, _ptr, _ptrs, _sizes, _size)),
    ("terse_sharded_onebit_adam_shrunk_parts", _status, (_ptr, _ptr, _sizes)),
    ("terse_sharded_onebit_adam_serialize", _status, (_ptr, _ptr, _sizes)),
    ("terse_sharded_onebit_adam_deserialize", _status,
     (_ptrs, _sizes, _size, _int, _int, _ptrs)),
    ("terse_sharded_onebit_adam_deserialize_remapped", _status,
     (_ptrs, _sizes, _size, _int, _int, _size, _c.POINTER(_i64), _ptrs)),
)


_lock = threading.Lock()
_lib = None


def _declare(lib):
    """Sets every function's argtypes and restype from the tables; AttributeError when one of
    _SIGNATURES is missing."""
    for table, required in ((_SIGNATURES, True), (_NEWER_SIGNATURES, False)):
        for name, restype, argtypes in table:
            fn = getattr(lib, name) if required else getattr(lib, name, None)
            if fn is not None:
                fn.restype = restype
                fn.argtypes = list(argtypes)


def lib():
    """The loaded library (loaded and declared on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} (no such file)")
                continue
            try:
                loaded = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            try:
                _declare(loaded)
            except AttributeError as e:
                tried.append(f"{path} (not terse's C API: {e})")
                continue
            _lib = loaded
            return _lib
        raise ImportError(
            "terse: cannot load libterse.so; tried:\n  " + "\n  ".join(tried) +
            "\nBuild it (cmake --build build --target terse_c) and set TERSE_LIBRARY to its path, "
            "e.g. TERSE_LIBRARY=$PWD/build/lib/libterse.so, or install it where the dynamic "
            "loader finds it (docs/pytorch.md)")


def library_path():
    """The file the library was loaded from (for messages and tests)."""
    l = lib()
    # dladdr is not reachable through ctypes portably; /proc/self/maps names every mapped file.
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libterse.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return l._name


def has(name):
    """Whether the loaded library has `name`, one of _NEWER_SIGNATURES (an older build may not)."""
    return getattr(lib(), name, None) is not None


def require(names, feature):
    """The loaded library, or ImportError naming the functions among `names` that it lacks and
    the feature that needs them."""
    l = lib()
    missing = [n for n in names if getattr(l, n, None) is None]
    if missing:
        raise ImportError(f"terse: {library_path()} has no {', '.join(missing)}, which {feature} "
                          f"needs; rebuild libterse.so from a checkout that has them")
    return l


def cuda_info():
    """(built, usable) of the loaded library's CUDA path (terse_cuda_info): built with CUDA, and a
    device usable in this process. None for a library older than terse_cuda_info."""
    if not has("terse_cuda_info"):
        return None
    built, usable = ctypes.c_int(0), ctypes.c_int(0)
    lib().terse_cuda_info(ctypes.byref(built), ctypes.byref(usable))
    return bool(built.value), bool(usable.value)


def check(status):
    """Raises TerseError for a failed status, with the calling thread's message."""
    if status == OK:
        return
    l = lib()
    message = l.terse_last_error().decode(errors="replace")
    name = l.terse_status_name(status).decode(errors="replace")
    raise TerseError(status, name, message)


def version():
    return lib().terse_version().decode()


class Handle:
    """A C object this package owns (a communicator, an error-feedback state, an optimizer's
    core): made by a C constructor, freed exactly once by ``close()`` or when collected (after a
    failed ``__init__`` and at interpreter shutdown too). A closed one raises ValueError instead
    of passing NULL to C. Subclasses name their ``terse_*_destroy`` function and what messages
    call them."""

    _destroy = ""      # the terse_*_destroy function's name
    _what = ""         # e.g. "the communicator"
    _handle = None     # the c_void_p, None once freed (or never made)

    def _create(self, constructor, *args):
        """Takes the object constructor(*args, &object) makes (a terse_*_create or
        _deserialize); TerseError when it fails."""
        handle = ctypes.c_void_p()
        check(constructor(*args, ctypes.byref(handle)))
        self._handle = handle

    def _h(self):
        if self._handle is None:
            raise ValueError(f"terse: {self._what} is closed")
        return self._handle

    def _free(self):
        handle, self._handle = self._handle, None
        if handle is not None:
            getattr(lib(), self._destroy)(handle)

    def close(self):
        """Frees the C object; later calls raise ValueError. A second close does nothing."""
        self._free()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 -- interpreter shutdown: the library may be gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serialized(serialize, handle):
    """The checkpoint bytes of one of the terse_*_serialize functions: it is asked the size
    first (buffer NULL), then fills a buffer of that size."""
    size = ctypes.c_size_t(0)
    check(serialize(handle, None, ctypes.byref(size)))
    buf = ctypes.create_string_buffer(size.value)
    check(serialize(handle, buf, ctypes.byref(size)))
    return buf.raw[:size.value]
