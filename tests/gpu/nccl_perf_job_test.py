#!/usr/bin/env python3
"""tests/gpu/nccl_perf_job.py's CPU-side logic without torch or a GPU: sizes, transports, each
rank's environment (NCCL forced onto the network, the plugin only where asked), and what it reads
from NCCL's log (lines in the format NCCL 2.28.9 wrote in the 2026-11-28 check).

    python3 tests/gpu/nccl_perf_job_test.py
"""
import argparse
import importlib.util
import os
import unittest

spec = importlib.util.spec_from_file_location(
    "nccl_perf_job", os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl_perf_job.py"))
job = importlib.util.module_from_spec(spec)
spec.loader.exec_module(job)

LOG = """\
vm:1887:1887 [0] NCCL INFO NET/Plugin: Loaded net plugin terse (v11)
vm:1887:1887 [0] NCCL INFO Using network terse
vm:1887:1933 [0] NCCL INFO CollNet/terse : rank 0 of 2 connected via 127.0.0.1:36607, codec int8
vm:1887:1887 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}
vm:1887:1887 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo COLLNET_CHAIN proto SIMPLE channel{Lo..Hi}={0..1}
vm:1887:1887 [0] NCCL INFO AllReduce: 8388608 Bytes -> Algo COLLNET_CHAIN proto SIMPLE channel{Lo..Hi}={0..1}
"""


class Job(unittest.TestCase):
    def test_sizes(self):
        self.assertEqual(job.parse_size("4M"), 4 << 20)
        self.assertEqual(job.parse_size("1G"), 1 << 30)
        self.assertEqual(job.parse_size("512KB"), 512 << 10)
        for bad in ("", "3", "x", "-4M", "4T"):
            with self.assertRaises(argparse.ArgumentTypeError):
                job.parse_size(bad)
        self.assertEqual(len(job.sizes_of(4 << 20, 1 << 30, 2)), 9)
        self.assertEqual(job.sizes_of(4 << 20, 256 << 20, 4),
                         [4 << 20, 16 << 20, 64 << 20, 256 << 20])
        with self.assertRaises(ValueError):
            job.sizes_of(8, 4, 2)
        with self.assertRaises(ValueError):
            job.sizes_of(4, 8, 1)

    def test_transports_and_environment(self):
        for t in ("socket", "net", "collnet-int8", "collnet-mxfp8", "collnet-int8:block=128"):
            self.assertEqual(job.check_transport(t), t)
        for bad in ("ib", "collnet-", "collnet-INT8", "net2"):
            with self.assertRaises(argparse.ArgumentTypeError):
                job.check_transport(bad)
        sock = job.rank_env("socket", 1, 2, "/p.so", "eth0", "10.0.0.1", 5, 6)
        self.assertEqual((sock["NCCL_NET"], sock["NCCL_HOSTID"], sock["NCCL_SOCKET_IFNAME"]),
                         ("Socket", "terse-host-1", "eth0"))
        self.assertNotIn("NCCL_NET_PLUGIN", sock)
        self.assertEqual(sock["NCCL_COLLNET_ENABLE"], "0")
        net = job.rank_env("net", 0, 2, "/p.so", "lo", "127.0.0.1", 5, 6)
        self.assertEqual((net["NCCL_NET"], net["NCCL_NET_PLUGIN"], net["NCCL_COLLNET_ENABLE"]),
                         ("terse", "/p.so", "0"))
        self.assertNotIn("TERSE_COLLNET_CODEC", net)
        coll = job.rank_env("collnet-mxfp8", 0, 2, "/p.so", "lo", "127.0.0.1", 5, 6)
        self.assertEqual((coll["NCCL_COLLNET_ENABLE"], coll["TERSE_COLLNET_CODEC"]),
                         ("1", "mxfp8"))
        for env in (sock, net, coll):  # every byte over the network
            self.assertEqual((env["NCCL_P2P_DISABLE"], env["NCCL_SHM_DISABLE"]), ("1", "1"))

    def test_what_the_log_says(self):
        self.assertEqual(job.algorithms_from_log(LOG),
                         {4194304: "COLLNET_CHAIN/SIMPLE", 8388608: "COLLNET_CHAIN/SIMPLE"})
        facts = job.log_facts(LOG)
        self.assertEqual(facts["nccl_algorithms"], {"RING/SIMPLE": 1, "COLLNET_CHAIN/SIMPLE": 2})
        self.assertTrue(facts["net_plugin_loaded"])
        self.assertEqual(facts["using_network"], "terse")
        self.assertTrue(facts["collnet_connected"])
        self.assertEqual(job.log_facts("")["using_network"], None)

    def test_plan_needs_no_torch(self):
        self.assertEqual(job.main(["allreduce", "--transport", "net", "--plan"]), 0)


if __name__ == "__main__":
    unittest.main()
