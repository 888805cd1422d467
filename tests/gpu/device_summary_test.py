#!/usr/bin/env python3
"""scripts/device-summary.py's parsers of issue #45's stages, on synthetic inputs written here
(made-up figures in the shapes terse-bench -J and tests/gpu/nccl_perf_job.py write; nothing here
is a measurement): the pairing of host and CUDA rows, the overlap table, the targets and their
verdicts, the DDP loss comparison, the Markdown, and the plot (where matplotlib is importable).

    python3 tests/gpu/device_summary_test.py
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "device-summary.py")
spec = importlib.util.spec_from_file_location("device_summary", SCRIPT)
ds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ds)

GIB = 1 << 30


def bench_row(kind, ranks, codec, buffers, us, size=32 << 20, compress=0.0, reduce=0.0):
    return {"collective": kind, "ranks": ranks, "bytes": size, "codec": codec + ":x=1",
            "time_us": us, "busbw_gbs": size / us / 1e3, "maxrelerr": 1e-3, "buffers": buffers,
            "compress_us": compress, "reduce_us": reduce}


def perf(transport, link, points, mode="allreduce"):
    return {"mode": mode, "transport": transport, "link": link, "failures": [],
            "rows": [{"bytes": b, "time_us": b / bw / 1e3, "busbw_gbs": bw, "maxrelerr": 0.0,
                      "algo": "RING/SIMPLE"} for b, bw in points]}


def ddp_run(transport, link, steps_per_s, losses):
    return {"mode": "ddp", "transport": transport, "link": link, "failures": [],
            "params": 97_000_000, "steps": len(losses), "steps_per_s": steps_per_s,
            "batch": 8, "seq": 256, "losses": losses}


class Parsers(unittest.TestCase):
    def test_coll_rows_pair_host_and_cuda_and_measure_overlap(self):
        with tempfile.TemporaryDirectory() as d:
            def write(name, rows):
                with open(os.path.join(d, name), "w") as f:
                    json.dump(rows, f)
            write("2-allreduce-cuda.json", [bench_row("allreduce", 2, "int8", "cuda", 1000,
                                                      compress=200, reduce=100)])
            write("2-allreduce-host.json", [bench_row("allreduce", 2, "int8", "host", 4000)])
            write("2-allreduce-cuda-serial.json", [bench_row("allreduce", 2, "int8", "cuda", 1300)])
            write("notes.txt", [])
            write("4-allreduce-cuda.json", "not a list")  # a broken file is left out
            rows = ds.coll_rows(d)
        self.assertEqual(len(rows), 3)
        table = ds.coll_table(rows)
        self.assertEqual(len(table), 1)
        t = table[0]
        self.assertEqual((t["codec"], t["host_us"], t["cuda_us"], t["cuda_codec_us"]),
                         ("int8", 4000, 1000, 300))
        self.assertAlmostEqual(t["cuda_vs_host"], 4.0)
        ov = ds.overlap_table(rows)
        self.assertEqual(len(ov), 1)
        self.assertAlmostEqual(ov[0]["saved_us"], 300)
        self.assertAlmostEqual(ov[0]["speedup"], 1.3)

    def test_targets_met_missed_and_not_measured(self):
        runs = [perf("socket", "loopback", [(4 << 20, 1.0), (GIB, 2.0)]),
                perf("net", "loopback", [(4 << 20, 1.0), (GIB, 1.95)]),
                perf("socket", "10gbit", [(4 << 20, 1.0), (256 << 20, 1.1)]),
                perf("collnet-int8", "10gbit", [(4 << 20, 1.5), (256 << 20, 2.2)])]
        rows = ds.perf_rows(runs)
        ddp = [ddp_run("socket", "10gbit", 2.0, [5.0] * 20),
               ddp_run("collnet-int8", "10gbit", 3.2, [5.0] * 19 + [5.2])]
        got = {t["target"]: t for t in ds.targets(rows, ddp)}
        net = got["net plugin / Socket busbw at 1 GiB (loopback)"]
        self.assertEqual(net["status"], "met")
        self.assertAlmostEqual(net["value"], 0.975)
        coll = got["CollNet int8 / Socket busbw at 10 Gbit/s"]
        self.assertEqual(coll["status"], "missed")  # 2.0x at 256 MiB, the goal is 2.5x
        self.assertAlmostEqual(coll["value"], 2.0)
        self.assertIn(str(256 << 20), coll["what"])
        self.assertEqual(got["DDP steps/s CollNet int8 / Socket at 10 Gbit/s"]["status"], "met")
        loss = got["DDP loss CollNet int8 within 1% of Socket (10gbit)"]
        self.assertAlmostEqual(loss["value"], 0.02 / 5.0)  # mean of the last 10: 5.02 vs 5.0
        self.assertIn("fewer than the issue's 200", loss["what"])

    def test_nothing_measured_is_said(self):
        got = ds.targets([], [])
        self.assertTrue(all(t["status"] == "not measured" for t in got))
        self.assertEqual(len(got), 6)

    def test_kernel_targets_take_each_groups_lowest_ratio(self):
        bench = [{"kernel": k, "us": 1.0, "gbs": 1.0, "ratio": r} for k, r in [
            ("memcpy f32 (baseline)", 1.0), ("convert f32->f16", 0.5),
            ("int8Quantize f32 +residual", 0.9), ("fp8e5m2Quantize f32 stochastic", 0.7),
            ("onebitDecompressAccumulate", 0.85), ("topkCompress f32 1% +residual", 0.35),
            ("topkDecompress f32 1%", 0.6), ("topkDecompressAccumulate 1%", 0.2)]]
        got = {t["target"]: t for t in ds.targets([], [], bench)}
        codecs = got["every block-codec and onebit encoder and decoder / copy"]
        self.assertEqual(codecs["status"], "missed")  # the cast at 0.5 is not in the group
        self.assertAlmostEqual(codecs["value"], 0.7)
        self.assertIn("below: fp8e5m2Quantize f32 stochastic", codecs["what"])
        self.assertEqual(got["topk compress / copy"]["status"], "met")
        dec = got["topk decoders / copy"]
        self.assertEqual((dec["status"], dec["value"]), ("missed", 0.2))

    def test_ddp_compare_uses_the_steps_both_ran(self):
        ddp = [ddp_run("socket", "loopback", 1.0, [4.0] * 30),
               ddp_run("collnet-int8", "loopback", 1.0, [4.0] * 10 + [8.0] * 20)]
        c = ds.ddp_compare(ddp, "loopback")
        self.assertEqual(c["steps_compared"], 30)
        self.assertAlmostEqual(c["loss_rel_diff"], 1.0)
        ddp[1]["losses"] = ddp[1]["losses"][:10]
        self.assertEqual(ds.ddp_compare(ddp, "loopback")["loss_rel_diff"], 0.0)
        self.assertIsNone(ds.ddp_compare(ddp, "10gbit"))


class WholeSummary(unittest.TestCase):
    def test_summary_from_a_logs_directory(self):
        with tempfile.TemporaryDirectory() as logs, tempfile.TemporaryDirectory() as out:
            with open(os.path.join(logs, "machine.txt"), "w") as f:
                f.write("date=2026-11-29T00:00:00Z\ngpu=none\n")
            with open(os.path.join(logs, "results.tsv"), "w") as f:
                f.write("nccl-perf\tok\t80\tok: 6 of 6\nddp\tok\t70\tok\ncoll-device\tok\t50\tok\n")
            for sub, name, data in [
                    ("nccl-perf", "allreduce-socket.json",
                     perf("socket", "loopback", [(4 << 20, 1.0), (GIB, 2.0)])),
                    ("nccl-perf", "allreduce-collnet-int8.json",
                     perf("collnet-int8", "loopback", [(4 << 20, 2.0), (GIB, 5.0)])),
                    ("nccl-perf", "allreduce-socket-result0.json", {"rows": []}),  # not a run
                    ("netem", "allreduce-socket-10gbit.json",
                     perf("socket", "10gbit", [(4 << 20, 1.0), (256 << 20, 1.1)])),
                    ("ddp", "ddp-socket.json", ddp_run("socket", "loopback", 4.0, [6.0, 5.0])),
                    ("ddp", "ddp-collnet-int8.json",
                     ddp_run("collnet-int8", "loopback", 5.0, [6.0, 5.01]))]:
                os.makedirs(os.path.join(logs, sub), exist_ok=True)
                with open(os.path.join(logs, sub, name), "w") as f:
                    json.dump(data, f)
            os.makedirs(os.path.join(logs, "coll"))
            with open(os.path.join(logs, "coll", "2-allreduce-cuda.json"), "w") as f:
                json.dump([bench_row("allreduce", 2, "none", "cuda", 500)], f)
            rc = subprocess.run([sys.executable, SCRIPT, "--logs", logs, "--out", out,
                                 "--dry-run", "1"], capture_output=True, text=True)
            self.assertEqual(rc.returncode, 0, rc.stderr)
            with open(os.path.join(out, "summary.json")) as f:
                summary = json.load(f)
            with open(os.path.join(out, "summary.md")) as f:
                md = f.read()
            self.assertEqual(len(summary["nccl_perf"]), 6)
            self.assertEqual(len(summary["ddp"]), 2)
            self.assertEqual(len(summary["coll_device"]), 1)
            self.assertIn("| 1G | 2.00 (RING/SIMPLE) | 5.00 (RING/SIMPLE) |", md)
            self.assertIn("NCCL allreduce bus bandwidth (GB/s), 10gbit", md)
            self.assertIn("DDP (loopback, collnet-int8): 97.0M parameters", md)
            self.assertIn("| DDP loss CollNet int8 within 1% of Socket (loopback) | 0.01 |", md)
            try:
                import matplotlib  # noqa: F401
                have_mpl = True
            except ImportError:
                have_mpl = False
            if have_mpl:
                self.assertEqual(summary["plots"], ["busbw.png"])
                self.assertGreater(os.path.getsize(os.path.join(out, "busbw.png")), 1000)
            else:
                self.assertIn("no matplotlib", summary["plot_note"])
            # --replot makes the plot again from the returned summary alone.
            rp = subprocess.run([sys.executable, SCRIPT, "--replot",
                                 os.path.join(out, "summary.json"), out],
                                capture_output=True, text=True)
            self.assertEqual(rp.returncode, 0 if have_mpl else 1, rp.stdout + rp.stderr)


if __name__ == "__main__":
    unittest.main()
