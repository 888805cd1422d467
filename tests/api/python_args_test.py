"""The Python package's argument checks (issue #22, item 13): values that ctypes would wrap or
truncate silently must raise ValueError/TypeError before they reach the C API. Torch-free: uses
the package's ctypes layer and a world-of-one communicator.

Run by ctest (Python.Args) with PYTHONPATH=python and TERSE_LIBRARY=the built libterse.so; by
hand: PYTHONPATH=python TERSE_LIBRARY=build/lib/libterse.so python3 tests/api/python_args_test.py
"""
import ctypes
import os
import sys
import unittest

import terse
from terse import _lib
from terse.comm import Communicator, Feedback, parse_feedback_header


class Tensor:
    """The part of torch's tensor interface comm.py reads: float32 values in host memory."""
    dtype = "torch.float32"
    device = None

    def __init__(self, values):
        self.buf = (ctypes.c_float * len(values))(*values)

    def data_ptr(self):
        return ctypes.addressof(self.buf)

    def numel(self):
        return len(self.buf)

    def is_contiguous(self):
        return True


class FeedbackCount(unittest.TestCase):
    def test_counts_past_size_t_are_rejected_not_wrapped(self):
        # ctypes wraps modulo 2**64: 2**64 once made 0 elements and 2**64+5 made 5.
        for count in (2**64, 2**64 + 5, 2**70):
            with self.subTest(count=count):
                with self.assertRaises(ValueError) as err:
                    Feedback("onebit", count)
                self.assertIn(str(count), str(err.exception))

    def test_negative_counts_are_rejected(self):
        for count in (-1, -(2**64)):
            with self.subTest(count=count):
                with self.assertRaises(ValueError):
                    Feedback("onebit", count)

    def test_bool_is_not_a_count(self):
        for count in (True, False):
            with self.subTest(count=count):
                with self.assertRaises(TypeError):
                    Feedback("onebit", count)

    def test_non_integers_are_rejected(self):
        for count in (3.0, "5", None):
            with self.subTest(count=count):
                with self.assertRaises(TypeError):
                    Feedback("onebit", count)

    def test_impossible_but_representable_count_is_invalid_argument(self):
        # Fits a size_t, so it reaches C, whose answer must be the caller's mistake (invalid
        # argument), not "a bug in terse" (internal) as it once was.
        with self.assertRaises(_lib.TerseError) as err:
            Feedback("onebit", 2**64 - 1)
        self.assertEqual(err.exception.status, _lib.INVALID_ARGUMENT, str(err.exception))

    def test_valid_counts_still_work(self):
        class Index:  # an integer-like type (numpy's ints are such) is a count too
            def __index__(self):
                return 7
        for count in (0, 5, Index()):
            with self.subTest(count=count):
                with Feedback("onebit", count) as fb:
                    self.assertTrue(len(fb.to_bytes()) > 0)
        self.assertEqual(Feedback("onebit", Index()).count, 7)


class CodecSpec(unittest.TestCase):
    def test_nul_in_spec_is_rejected(self):
        # A NUL ends the C string: "int8\x00garbage" was accepted as int8.
        for spec in ("int8\x00garbage", "\x00", "topk:ratio=0.1\x00"):
            with self.subTest(spec=spec):
                with self.assertRaises(ValueError) as err:
                    Feedback(spec, 4)
                self.assertIn("NUL", str(err.exception))

    def test_non_string_spec_is_a_type_error(self):
        with self.assertRaises(TypeError):
            Feedback(b"int8", 4)

    def test_bad_spec_reaches_c_and_fails_there(self):
        with self.assertRaises(_lib.TerseError) as err:
            Feedback("bogus", 4)
        self.assertEqual(err.exception.status, _lib.INVALID_ARGUMENT)


class RelayoutFeedback(unittest.TestCase):
    """Communicator.relayout_feedback's own checks; the relayout itself runs in
    Python.ShrinkOnRequest."""

    @classmethod
    def setUpClass(cls):
        cls.comm = Communicator()  # a world of one, not made by shrink()

    @classmethod
    def tearDownClass(cls):
        cls.comm.close()

    def test_old_rank_and_world_are_needed_off_a_shrink(self):
        self.assertIsNone(self.comm.shrunk_from)
        with self.assertRaises(ValueError) as err:
            self.comm.relayout_feedback([Feedback("onebit", 4)])
        self.assertIn("old_rank", str(err.exception))

    def test_arguments_of_the_wrong_type(self):
        with self.assertRaises(TypeError):
            self.comm.relayout_feedback([b"state"], old_rank=0, old_world=1)
        with self.assertRaises(TypeError):
            self.comm.relayout_feedback([Feedback("onebit", 4)], old_rank=True, old_world=1)

    def test_a_world_of_one_and_a_bad_old_rank(self):
        with Feedback("onebit", 4) as fb:
            fb.worker()[2] = 0.5
            self.comm.relayout_feedback([fb], old_rank=0, old_world=1)
            self.assertEqual(list(fb.worker()), [0, 0, 0.5, 0])
            with self.assertRaises(_lib.TerseError) as err:
                self.comm.relayout_feedback([fb], old_rank=3, old_world=2)
            self.assertEqual(err.exception.status, _lib.INVALID_ARGUMENT)
            self.assertIn("out of range", str(err.exception))
        self.comm.relayout_feedback([], old_rank=0, old_world=1)


class Part(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.comm = Communicator()  # a world of one: no launcher variables in ctest's environment

    @classmethod
    def tearDownClass(cls):
        cls.comm.close()

    def test_negative_count(self):
        # -1 once became SIZE_MAX and part() answered a huge length.
        with self.assertRaises(ValueError):
            self.comm.part(-1)

    def test_count_past_size_t(self):
        with self.assertRaises(ValueError):
            self.comm.part(2**64)

    def test_bool_count(self):
        with self.assertRaises(TypeError):
            self.comm.part(True)

    def test_valid_count(self):
        self.assertEqual(self.comm.part(10), (0, 10))
        self.assertEqual(self.comm.part(0), (0, 0))

    def test_allreduce_algorithm(self):
        t = Tensor([1, 2, 3, 4])
        self.comm.allreduce(t, codec="none", op="sum", algorithm="flat")
        self.assertEqual(list(t.buf), [1, 2, 3, 4])
        with self.assertRaises(ValueError):
            self.comm.allreduce(t, algorithm="hierarchical")

    def test_allreduce_nul_codec(self):
        with self.assertRaises(ValueError):
            self.comm.allreduce(Tensor([1, 2, 3, 4]), codec="int8\x00garbage", op="sum")
        t = Tensor([1, 2, 3, 4])
        self.comm.allreduce(t, codec="none", op="sum")
        self.assertEqual(list(t.buf), [1, 2, 3, 4])



ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "python", "terse")


def header_functions():
    """{name: (ctypes return type, [ctypes argument types])} of every function terse.h declares,
    by the rules _lib's table follows: an opaque handle, a buffer or an options struct is
    c_void_p, a pointer to sizes, ints or int64s is POINTER of that type, a pointer to handles
    POINTER(c_void_p), a float** POINTER(POINTER(c_float)), char* c_char_p, and the enums int."""
    import re
    with open(os.path.join(ROOT, "include", "terse", "terse.h")) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    scalars = {"int": ctypes.c_int, "terse_status_t": ctypes.c_int, "terse_dtype_t": ctypes.c_int,
               "terse_redop_t": ctypes.c_int, "size_t": ctypes.c_size_t,
               "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64, "float": ctypes.c_float}

    def ctype(tokens):
        tokens = [t for t in tokens if t != "const"]
        base, stars = tokens[0], tokens.count("*")
        if stars == 0:
            return None if base == "void" else scalars[base]
        if stars == 1:
            if base == "char":
                return ctypes.c_char_p
            if base in ("size_t", "int", "int64_t", "uint64_t"):
                return ctypes.POINTER(scalars[base])
            return ctypes.c_void_p
        if base == "float":
            return ctypes.POINTER(ctypes.POINTER(ctypes.c_float))
        return ctypes.POINTER(ctypes.c_void_p)

    found = {}
    for ret, name, params in re.findall(r"([A-Za-z_][\w\s*]*?)\b(terse_\w+)\s*\(([^()]*)\)\s*;",
                                        text):
        args = []
        for param in params.split(","):
            tokens = re.findall(r"\w+|\*", param)
            if tokens in ([], ["void"]):
                continue
            args.append(ctype(tokens[:-1]))   # the last token is the parameter's name
        found[name] = (ctype(re.findall(r"\w+|\*", ret)), args)
    return found


class SignatureTable(unittest.TestCase):
    """_lib's one table of the C API's signatures (issue 46, item 6) against the header: a wrong
    type there is a value C misreads, or a result Python truncates."""

    def test_every_declaration_is_the_headers(self):
        header = header_functions()
        self.assertGreater(len(header), 60, "the header parser found too few functions")
        self.assertEqual(header["terse_sharded_onebit_adam_deserialize_remapped"][1][6],
                         ctypes.POINTER(ctypes.c_int64))
        for name, restype, argtypes in _lib._SIGNATURES + _lib._NEWER_SIGNATURES:
            with self.subTest(name=name):
                self.assertIn(name, header, "declared in _lib, absent from terse.h")
                self.assertEqual((restype, list(argtypes)), header[name])

    def test_the_loaded_library_is_declared_by_the_table(self):
        l = _lib.lib()
        for name, restype, argtypes in _lib._SIGNATURES + _lib._NEWER_SIGNATURES:
            if _lib.has(name):
                with self.subTest(name=name):
                    fn = getattr(l, name)
                    self.assertEqual((fn.restype, fn.argtypes), (restype, list(argtypes)))

    def test_no_signature_is_declared_elsewhere(self):
        for file in sorted(os.listdir(PACKAGE)):
            if file.endswith(".py") and file != "_lib.py":
                with open(os.path.join(PACKAGE, file)) as f:
                    text = f.read()
                with self.subTest(file=file):
                    self.assertNotIn(".argtypes", text)
                    self.assertNotIn(".restype", text)

def two_communicators():
    """Under terse-run: two Communicators made back to back in one process (the first not closed,
    no collective between) both work, used interleaved (issue #22, item 6)."""
    a = Communicator()
    b = Communicator()
    n = a.size
    # Run without --nodes: every rank on this host, local rank = rank.
    if (a.local_rank, a.local_size, a.node, a.node_count) != (a.rank, n, 0, 1):
        print(f"python_args_test: FAILED: topology {a.local_rank}/{a.local_size} node "
              f"{a.node}/{a.node_count} for rank {a.rank} of {n} on one host")
        return 1
    for k, comm in enumerate((a, b, a, b)):
        t = Tensor([float(a.rank + 1)] * 5)
        comm.allreduce(t, codec="none", op="sum")
        want = float(n * (n + 1) // 2)
        if list(t.buf) != [want] * 5:
            print(f"python_args_test: FAILED: allreduce {k} gave {list(t.buf)}, expected {want}")
            return 1
    b.close()
    a.close()
    print(f"python_args_test: rank {a.rank}: two communicators back to back work")
    return 0


def server_residual(fb):
    """The server residual of a Feedback, read from its checkpoint form (docs/wire-format.md)."""
    data = fb.to_bytes()
    header = parse_feedback_header(data)
    at = 40 + (len(header["spec"]) + 3) // 4 * 4 + 4 * header["count"]
    return list(memoryview(data[at:at + 4 * header["server_length"]]).cast("f"))


def shrink_on_request():
    """Under terse-run --store <dir>: the last rank is left out on request while it lives (it
    closes its communicator and leaves); the others' Communicator.shrink gives a communicator of
    them, ranked densely in world order, whose allreduce sums their values (issue #48). A onebit
    Feedback used before the shrink follows the survivors (relayout_feedback): its worker
    residual stays and its server residual becomes the new world's allreduce chunk."""
    comm = Communicator()
    n, rank = comm.size, comm.rank
    # 3 units of 2048 (the allreduce cuts its chunks at whole units): in a world of 3 each rank
    # owns one; of the 2 survivors rank 0 owns the first two (its own old chunk and old rank
    # 1's) and rank 1 the last, whose residual was old rank 2's and is lost with it (zeros).
    count = 3 * 2048
    fb = Feedback("onebit", count)
    comm.allreduce(Tensor([float((i * 7 + rank) % 11 - 5) for i in range(count)]), codec="onebit",
                   feedback=fb)
    worker = list(fb.worker())
    old_server = server_residual(fb)
    if rank == n - 1:
        comm.close()
        return 0
    if rank == 0:
        try:
            comm.shrink(exclude=[n])
            print(f"python_args_test: FAILED: shrink accepted rank {n} of a world of {n}")
            return 1
        except _lib.TerseError as error:
            if "outside" not in str(error):
                print(f"python_args_test: FAILED: shrink(exclude=[{n}]) said {error}")
                return 1
    # Only rank 0 was refused; a refusal of the arguments checks nothing in, so its next shrink
    # still meets the others'.
    new = comm.shrink(exclude=[n - 1])
    t = Tensor([float(rank + 1)] * 5)
    new.allreduce(t, codec="none", op="sum")
    want = float((n - 1) * n // 2)
    if (new.rank, new.size) != (rank, n - 1) or list(t.buf) != [want] * 5:
        print(f"python_args_test: FAILED: after the shrink rank {new.rank} of {new.size}, "
              f"allreduce {list(t.buf)} (expected rank {rank} of {n - 1}, sum {want})")
        return 1
    if new.shrunk_from != (rank, n):
        print(f"python_args_test: FAILED: shrunk_from {new.shrunk_from}, want {(rank, n)}")
        return 1
    new.relayout_feedback([fb])
    header = parse_feedback_header(fb.to_bytes())
    if n == 3:
        want = (0, 2 * 2048) if rank == 0 else (2 * 2048, 2048)
        got = (header["server_offset"], header["server_length"])
        if header["server_world"] != 2 or got != want:
            print(f"python_args_test: FAILED: after relayout_feedback the server chunk is {got} of "
                  f"world {header['server_world']}, want {want} of world 2")
            return 1
        server = server_residual(fb)
        kept = server[:2048] == old_server and any(server[2048:]) if rank == 0 else \
            not any(server)
        if not kept or not any(old_server):
            print(f"python_args_test: FAILED: rank {rank}'s server residual after the relayout "
                  f"does not hold {'its own and old rank 1' if rank == 0 else 'zeros'}")
            return 1
    if list(fb.worker()) != worker:
        print("python_args_test: FAILED: relayout_feedback changed the worker residual")
        return 1
    new.allreduce(Tensor([1.0] * count), codec="onebit", feedback=fb)
    new.close()
    comm.close()
    print(f"python_args_test: rank {rank}: shrunk to {n - 1} ranks")
    return 0


class Odd(Tensor):
    """A tensor comm.py must refuse: not contiguous, or of a dtype terse does not reduce."""
    def __init__(self, values, dtype="torch.float32", contiguous=True):
        super().__init__(values)
        self.dtype = dtype
        self.contiguous = contiguous

    def is_contiguous(self):
        return self.contiguous


def refused_arguments():
    """Under terse-run -n 2: one rank's allreduce is refused by the Python layer itself (before
    any terse_* call), the other's is valid. The refused call must still take its place among
    the ranks' calls, so the valid rank fails that same call at once (it once paired with the
    refusing rank's next allreduce, and both returned ok with wrong sums), and the ranks' next
    call is right (issue #22)."""
    import time
    comm = Communicator()
    if comm.size != 2:
        print("python_args_test: refused-arguments needs 2 ranks")
        return 1
    bad = [
        ("op", lambda t: dict(tensor=t, op="max")),
        ("dtype", lambda t: dict(tensor=Odd([1.0] * 5, dtype="torch.float64"))),
        ("contiguity", lambda t: dict(tensor=Odd([1.0] * 5, contiguous=False))),
        ("out", lambda t: dict(tensor=t, out=Tensor([0.0] * 4))),
        ("NUL in codec", lambda t: dict(tensor=t, codec="int8\x00junk")),
        ("codec type", lambda t: dict(tensor=t, codec=8)),
        ("algorithm", lambda t: dict(tensor=t, algorithm="ring")),
        # Valid in Python, refused by the C layer (two-level on one node): every rank is told.
        ("twolevel on one node", lambda t: dict(tensor=t, algorithm="twolevel")),
    ]
    failures = 0
    for asynchronous in (False, True):
        for what, args in bad:
            t = Tensor([float(comm.rank + 1)] * 5)
            kwargs = dict(tensor=t, codec="none", op="sum")
            if comm.rank == 1:
                kwargs.update(args(t))
            start = time.monotonic()
            got = None
            try:
                if asynchronous:
                    comm.allreduce_async(**kwargs).result()
                else:
                    comm.allreduce(**kwargs)
            except (TypeError, ValueError, _lib.TerseError) as error:
                got = error
            took = time.monotonic() - start
            label = f"{'async ' if asynchronous else ''}{what}"
            if what == "twolevel on one node":
                if comm.rank == 1 and not isinstance(got, _lib.TerseError):
                    print(f"python_args_test: FAILED: {label}: rank 1 got {got!r}, not terse's "
                          f"error")
                    failures += 1
            elif comm.rank == 1 and not isinstance(got, (TypeError, ValueError)):
                print(f"python_args_test: FAILED: {label}: rank 1 got {got!r}, not its refusal")
                failures += 1
            if comm.rank == 0:
                if not isinstance(got, _lib.TerseError):
                    print(f"python_args_test: FAILED: {label}: rank 0's call returned "
                          f"{list(t.buf)} instead of failing with rank 1's refusal")
                    failures += 1
                elif "rank 1" not in str(got) or took > 5.0:
                    print(f"python_args_test: FAILED: {label}: rank 0 got {got} after "
                          f"{took:.3f} s (must name rank 1, well within the timeout)")
                    failures += 1
            # The next call pairs with the peer's next call: both right.
            t = Tensor([float(comm.rank + 1)] * 5)
            comm.allreduce(t, codec="none", op="sum")
            if list(t.buf) != [3.0] * 5:
                print(f"python_args_test: FAILED: after {label}: the next allreduce gave "
                      f"{list(t.buf)}, expected 3.0")
                failures += 1
    comm.close()
    if failures == 0:
        print(f"python_args_test: rank {comm.rank}: every refused call failed on both ranks")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["two-communicators"]:
        sys.exit(two_communicators())
    if sys.argv[1:] == ["refused-arguments"]:
        sys.exit(refused_arguments())
    if sys.argv[1:] == ["shrink-on-request"]:
        sys.exit(shrink_on_request())
    for var in ("TERSE_RANK", "TERSE_WORLD_SIZE", "TERSE_STORE", "RANK", "WORLD_SIZE"):
        os.environ.pop(var, None)
    print(f"python_args_test: terse from {os.path.dirname(terse.__file__)}, "
          f"library {_lib.library_path()}")
    unittest.main(verbosity=2)
