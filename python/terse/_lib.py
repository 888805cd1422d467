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


_lock = threading.Lock()
_lib = None


def _declare(lib):
    c = ctypes
    vp, sz, i32, cp = c.c_void_p, c.c_size_t, c.c_int, c.c_char_p
    sigs = {
        "terse_last_error": (cp, []),
        "terse_status_name": (cp, [i32]),
        "terse_version": (cp, []),
        "terse_comm_create": (i32, [c.POINTER(vp)]),
        "terse_comm_destroy": (None, [vp]),
        "terse_comm_rank": (i32, [vp]),
        "terse_comm_size": (i32, [vp]),
        "terse_comm_local_rank": (i32, [vp]),
        "terse_comm_local_size": (i32, [vp]),
        "terse_comm_node": (i32, [vp]),
        "terse_comm_node_count": (i32, [vp]),
        "terse_comm_barrier": (i32, [vp]),
        "terse_comm_abort": (None, [vp, cp]),
        "terse_comm_reject": (i32, [vp, cp]),
        "terse_comm_part": (None, [vp, sz, c.POINTER(sz), c.POINTER(sz)]),
        "terse_allreduce": (i32, [vp, vp, vp, sz, i32, i32, cp, vp]),
        "terse_reduce_scatter": (i32, [vp, vp, vp, sz, i32, i32, cp, vp]),
        "terse_allgather": (i32, [vp, vp, vp, sz, i32, cp, vp]),
        "terse_allreduce_async": (i32, [vp, vp, vp, sz, i32, i32, cp, vp, c.POINTER(vp)]),
        "terse_reduce_scatter_async": (i32, [vp, vp, vp, sz, i32, i32, cp, vp, c.POINTER(vp)]),
        "terse_allgather_async": (i32, [vp, vp, vp, sz, i32, cp, vp, c.POINTER(vp)]),
        "terse_codec_info": (i32, [cp, cp, c.POINTER(sz), c.POINTER(i32)]),
        "terse_work_test": (i32, [vp]),
        "terse_work_wait": (i32, [vp]),
        "terse_work_free": (None, [vp]),
        "terse_feedback_create": (i32, [cp, sz, c.POINTER(vp)]),
        "terse_feedback_destroy": (None, [vp]),
        "terse_feedback_info": (i32, [vp, cp, c.POINTER(sz), c.POINTER(sz)]),
        "terse_feedback_reset": (None, [vp]),
        "terse_feedback_worker": (i32, [vp, c.POINTER(c.POINTER(c.c_float))]),
        "terse_feedback_serialize": (i32, [vp, vp, c.POINTER(sz)]),
        "terse_feedback_deserialize": (i32, [vp, sz, c.POINTER(vp)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    # Newer functions are declared where the library has them, so an older libterse.so still
    # loads for everything else; terse.optim checks for them and names what is missing.
    i64 = c.c_int64
    optional = {
        "terse_onebit_adam_options_default": (None, [vp]),
        "terse_onebit_adam_create": (i32, [sz, vp, c.POINTER(vp)]),
        "terse_onebit_adam_destroy": (None, [vp]),
        "terse_onebit_adam_step": (i32, [vp, vp, vp, vp, c.c_float]),
        "terse_onebit_adam_steps": (i64, [vp]),
        "terse_onebit_adam_reset_residuals": (None, [vp]),
        "terse_onebit_adam_frozen_at": (i64, [vp]),
        "terse_onebit_adam_serialize": (i32, [vp, vp, c.POINTER(sz)]),
        "terse_onebit_adam_deserialize": (i32, [vp, sz, c.POINTER(vp)]),
        "terse_allreduce_ex": (i32, [vp, vp, vp, sz, i32, i32, vp, c.POINTER(vp)]),
    }
    for name, (restype, argtypes) in optional.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
    # CUDA device pointers (terse.ddp and terse.optim's device path): optional like the above.
    cuda_info = getattr(lib, "terse_cuda_info", None)
    if cuda_info is not None:
        cuda_info.restype = None
        cuda_info.argtypes = [c.POINTER(i32), c.POINTER(i32)]


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


def cuda_info():
    """(built, usable) of the loaded library's CUDA path (terse_cuda_info): built with CUDA, and a
    device usable in this process. None for a library older than terse_cuda_info."""
    fn = getattr(lib(), "terse_cuda_info", None)
    if fn is None:
        return None
    built, usable = ctypes.c_int(0), ctypes.c_int(0)
    fn(ctypes.byref(built), ctypes.byref(usable))
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


# ---- ShardedOneBitAdam (terse.sharded_optim): declared where the library has them ------------
def _declare_sharded_onebit_adam(lib):
    c = ctypes
    vp, sz, i32, i64 = c.c_void_p, c.c_size_t, c.c_int, c.c_int64
    sigs = {
        "terse_sharded_onebit_adam_options_default": (None, [vp]),
        "terse_sharded_onebit_adam_create": (i32, [sz, i32, i32, vp, c.POINTER(vp)]),
        "terse_sharded_onebit_adam_destroy": (None, [vp]),
        "terse_sharded_onebit_adam_step": (i32, [vp, vp, vp, vp, c.c_float]),
        "terse_sharded_onebit_adam_reduce": (i32, [vp, vp, vp, vp]),
        "terse_sharded_onebit_adam_update": (i32, [vp, vp, vp, vp, c.c_float]),
        "terse_sharded_onebit_adam_steps": (i64, [vp]),
        "terse_sharded_onebit_adam_frozen_at": (i64, [vp]),
        "terse_sharded_onebit_adam_shard": (i32, [vp, c.POINTER(sz), c.POINTER(sz)]),
        "terse_sharded_onebit_adam_state_bytes": (sz, [vp]),
        "terse_sharded_onebit_adam_serialize": (i32, [vp, vp, c.POINTER(sz)]),
        "terse_sharded_onebit_adam_deserialize":
            (i32, [c.POINTER(vp), c.POINTER(sz), sz, i32, i32, c.POINTER(vp)]),
        "terse_sharded_onebit_adam_deserialize_remapped":
            (i32, [c.POINTER(vp), c.POINTER(sz), sz, i32, i32, sz, c.POINTER(i64),
                   c.POINTER(vp)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes


_declare_plain = _declare


def _declare(lib):  # noqa: F811 -- extends the declarations above with this block's functions
    _declare_plain(lib)
    _declare_sharded_onebit_adam(lib)
