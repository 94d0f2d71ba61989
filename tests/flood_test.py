#!/usr/bin/env python3
"""Floods a pserver, as anyone who reaches its port can, under systemd's
default open-file limit of 1,024 (issue 34's audit):

- 1,100 idle TCP connections held open (no token needed), from four
  addresses. gRPC 1.51 stopped accepting for good after accept4 failed
  with EMFILE, and no trainer could reach the pserver again; now the
  pserver sheds the connections past its open-file reserve, closes the
  rest after its 10 s handshake timeout, and a trainer started during the
  flood trains, one started after it too;
- the same from one address: it holds --max_connections_per_ip, and
  a trainer from another address trains at once;
- 800 pulls over one connection that never reads their replies (an HTTP/2
  window of 0 bytes): they took a pserver to 2.6 GiB; now it holds a
  bounded amount of replies, stays under its documented memory bound,
  trains another job's trainer meanwhile (its share of the bound is the
  flood's job's own) and a trainer afterwards.

    python3 tests/flood_test.py --bin_dir build
"""

import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time

import testlib

FLOOD = 1100
LIMIT = 1024
MAX_MEMORY_MB = 64


def open_files(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def field(number, wire_type, payload):
    key = varint((number << 3) | wire_type)
    if wire_type == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def pull_request(trainer_id, incarnation, table_id, blocks):
    """A PullRequest (proto/ps_service.proto) by hand: the test needs no
    protobuf module."""
    msg = field(1, 0, trainer_id) + field(9, 0, incarnation)
    for b in blocks:
        msg += field(4, 2, field(1, 0, table_id) + field(2, 0, b))
    return msg


def frame(kind, flags, stream, payload):
    """An HTTP/2 frame (RFC 7540 4.1)."""
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) +
            stream.to_bytes(4, "big") + payload)


def hpack_literal(name, value):
    """A header field as an HPACK literal without indexing (RFC 7541
    6.2.2); names and values under 127 bytes."""
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


class NonReadingClient:
    """An HTTP/2 client that sends gRPC calls and never takes their replies:
    its SETTINGS give every stream a window of 0 bytes, so the server may
    send no DATA (RFC 7540 6.9.2) and holds each reply. It still answers
    the server's SETTINGS and PINGs, and counts the calls refused outright
    (a HEADERS frame that ends its stream)."""

    def __init__(self, port, token, job):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.port, self.token, self.job = port, token, job
        self.next_stream = 1
        self.refused = 0
        initial_window_0 = (4).to_bytes(2, "big") + (0).to_bytes(4, "big")
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" +
                          frame(4, 0, 0, initial_window_0))
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        buf = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                kind, flags, payload = buf[3], buf[4], buf[9:9 + n]
                buf = buf[9 + n:]
                if not self._answer(kind, flags, payload):
                    return

    def _answer(self, kind, flags, payload):
        try:
            if kind == 4 and not flags & 1:  # SETTINGS: acknowledged
                self.sock.sendall(frame(4, 1, 0, b""))
            elif kind == 6 and not flags & 1:  # PING: answered
                self.sock.sendall(frame(6, 1, 0, payload))
            elif kind == 1 and flags & 1:  # HEADERS that end a stream
                self.refused += 1
        except OSError:
            return False
        return True

    def call(self, method, message):
        stream = self.next_stream
        self.next_stream += 2
        headers = b"".join(hpack_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", method),
            (":authority", "127.0.0.1:%d" % self.port),
            ("content-type", "application/grpc"), ("te", "trailers"),
            ("authorization", "Bearer " + self.token),
            ("shardps-job", self.job)))
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        self.sock.sendall(frame(1, 4, stream, headers) +
                          frame(0, 1, stream, body))

    def close(self):
        self.sock.close()


class FloodTest(testlib.ProcessTestCase):

    def setUp(self):
        super().setUp()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < FLOOD + 200:
            self.skipTest("this process may open only %d files" % hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE,
                        (soft, hard))
        self.sockets = []
        self.addCleanup(self.close_flood)
        self.token = os.path.join(self.tmp, "token")
        self.secret = os.urandom(24).hex()
        with open(self.token, "w") as f:
            f.write(self.secret)

    def close_flood(self):
        for s in self.sockets:
            s.close()
        self.sockets = []

    def flood(self, port, sources):
        """FLOOD idle connections, spread over the loopback addresses
        `sources` (the whole of 127/8 is this host)."""
        for i in range(FLOOD):
            s = socket.socket()
            s.bind((sources[i % len(sources)], 0))
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            self.sockets.append(s)

    def trainer(self, port, job, extra=(), trainers=1):
        with open(os.path.join(self.tmp, job + ".log"), "ab") as f:
            return self.popen(
                [testlib.trainer_bin(), "--pservers=127.0.0.1:%d" % port,
                 "--trainer_id=0", "--num_gradient_servers=%d" % trainers,
                 "--config=" + testlib.CONFIG, "--progress=off",
                 "--auth_token_file=" + self.token, "--job_id=" + job,
                 "--max_steps=40", "--metrics_file=" +
                 os.path.join(self.tmp, job + ".jsonl")] + list(extra),
                stdout=f, stderr=subprocess.STDOUT)

    def read(self, name):
        with open(os.path.join(self.tmp, name), errors="replace") as f:
            return f.read()

    def test_idle_connection_flood_under_1024_files(self):
        p, port, _ = self.start_pserver(
            "ps", ["--auth_token_file=" + self.token,
                   "--max_memory_mb=%d" % MAX_MEMORY_MB],
            max_open_files=LIMIT)
        self.assertIn("open files: 1024", self.read("ps.log"))
        # From four addresses, each under --max_connections_per_ip.
        self.flood(port, ["127.0.0.%d" % i for i in range(2, 6)])
        # The pserver takes what it can, short of its limit.
        testlib.wait_for(lambda: open_files(p.pid) > LIMIT - 100, 10)
        held = open_files(p.pid)
        self.assertLess(held, LIMIT)
        start = time.time()
        during = self.trainer(port, "during")
        self.assertEqual(during.wait(timeout=180), 0, self.read("during.log"))
        sys.stderr.write("[%d files open under the flood; a trainer during "
                         "it took %.1f s] " % (held, time.time() - start))
        self.assertIsNotNone(testlib.final_eval(
            os.path.join(self.tmp, "during.jsonl")))
        self.close_flood()
        after = self.trainer(port, "after")
        self.assertEqual(after.wait(timeout=120), 0, self.read("after.log"))
        log = self.read("ps.log")
        # It shed the rest as they came, and said so.
        self.assertIn("closed as soon as accepted", log)
        self.assertNotIn("Failed accept4", log)
        self.assertNotRegex(log, r"Check failed|terminate called|\*\*\* SIG")
        self.assertLess(testlib.vm_hwm_kib(p.pid), (MAX_MEMORY_MB + 384) * 1024)
        p.terminate()
        self.assertEqual(p.wait(timeout=30), 0)

    def test_a_flood_from_one_address_leaves_room_for_the_others(self):
        p, port, _ = self.start_pserver(
            "ps", ["--auth_token_file=" + self.token,
                   "--max_memory_mb=%d" % MAX_MEMORY_MB],
            max_open_files=LIMIT)
        log = self.read("ps.log")
        m = re.search(r"at most (\d+) connections from one address", log)
        self.assertIsNotNone(m, log)
        cap = int(m.group(1))
        self.assertLess(cap, LIMIT // 2)
        self.flood(port, ["127.0.0.2"])
        testlib.wait_for(lambda: "--max_connections_per_ip open" in
                         self.read("ps.log"), 10)
        time.sleep(1)
        held = open_files(p.pid)
        # The flood's address holds its cap, far from the limit...
        self.assertLess(held, cap + 100)
        # ...and a trainer from another address trains at once, before
        # the handshake timeout (10 s) would have freed anything.
        start = time.time()
        during = self.trainer(port, "during")
        self.assertEqual(during.wait(timeout=120), 0, self.read("during.log"))
        took = time.time() - start
        sys.stderr.write("[%d files open under a flood from one address "
                         "(cap %d); a trainer during it took %.1f s] " %
                         (held, cap, took))
        self.close_flood()
        self.assertIn("closed as soon as accepted: its address has "
                      "--max_connections_per_ip open",
                      self.read("ps.log"))
        p.terminate()
        self.assertEqual(p.wait(timeout=30), 0)

    def test_replies_nobody_reads(self):
        # 0 trainers on the pserver: each job brings its own count.
        p, port, _ = self.start_pserver(
            "ps", ["--auth_token_file=" + self.token,
                   "--max_memory_mb=%d" % MAX_MEMORY_MB], num_trainers=0)
        # Trainer 0 of a 2-trainer async job makes the job; the flood pulls
        # as trainer 1, which never started.
        victim = self.trainer(port, "victim", ["--mode=async",
                                               "--max_steps=100000"],
                              trainers=2)
        self.assertTrue(testlib.wait_for(
            lambda: "job ready" in self.read("ps.log"), 60))
        client = NonReadingClient(port, self.secret, "victim")
        # The first layer's weights: table 0, four blocks of 65536 floats
        # (0.8 MiB a reply, 640 MiB in all).
        request = pull_request(1, 77, 0, [0, 1, 2, 3])
        for _ in range(800):
            client.call("/shardps.ParameterServer/Pull", request)
        time.sleep(5)
        # Another job trains meanwhile, its pulls over gRPC: the flood's
        # unread replies take their own job's share of the bound, not the
        # others' room.
        other = self.trainer(port, "other", ["--shared_memory=false",
                                             "--tcp_lane=false"])
        self.assertEqual(other.wait(timeout=120), 0, self.read("other.log"))
        peak = testlib.vm_hwm_kib(p.pid)
        self.assertEqual(client.refused, 0,
                         "the flood's pulls were refused: fix the request")
        client.close()
        victim.kill()
        victim.wait()
        after = self.trainer(port, "after")
        self.assertEqual(after.wait(timeout=120), 0, self.read("after.log"))
        sys.stderr.write("[peak RSS %d MiB with 800 unread replies] " %
                         (peak // 1024))
        self.assertLess(peak, (MAX_MEMORY_MB + 384) * 1024,
                        "pserver peak RSS %d KiB" % peak)
        p.terminate()
        self.assertEqual(p.wait(timeout=30), 0)


if __name__ == "__main__":
    testlib.main()
