#!/usr/bin/env python3
"""The Python package (python/, docs/python.md) against real pservers on
loopback, compared with plain PyTorch:

- examples/torch_mlp.py, 2 sync trainers of batch 32, ends 50 steps with
  the parameters of one plain PyTorch process of batch 64 with
  torch.optim.SGD(momentum=0.9), to 1e-6;
- ShardedEmbeddingBag (sum with per-sample weights, and mean) and
  ShardedEmbedding with the pservers' Adagrad equal torch.nn.EmbeddingBag
  and torch.nn.Embedding with torch.optim.Adagrad, to 1e-6, on random
  64-bit ids with repeats;
- a pserver killed with SIGKILL under a Python job with --replication=2 is
  survived, and the job ends as the same job without the failure;
- bad arguments raise a clear exception and change nothing on the
  pservers; torchrun's variables place the trainer.

Runs in the PyTorch virtualenv of scripts/setup/python_venv.sh torch (it
starts itself again there when the interpreter that ran it has no torch):

    python3 tests/python_torch_test.py [--bin_dir build] [-k name]
"""

import json
import re
import os
import signal
import subprocess
import sys

import testlib
from testlib import read_json_lines, wait_for

VENV = os.environ.get("SHARDPS_TORCH_VENV",
                      os.path.expanduser("~/.cache/shardps/torch-venv"))
VENV_PYTHON = os.path.join(VENV, "bin", "python")
PYTHON_DIR = os.path.join(testlib.REPO, "python")
EXAMPLE = os.path.join(testlib.REPO, "examples", "torch_mlp.py")
DEEPFM = os.path.join(testlib.REPO, "examples", "torch_deepfm.py")


def _reexec_with_torch():
    """Starts this program again in the virtualenv when torch is missing
    here; exits 77 (skipped) naming the fix when there is none, or fails
    under CI, where scripts/setup/setup.sh must have made it."""
    try:
        import torch  # noqa: F401
        return
    except ImportError:
        pass
    if os.path.realpath(sys.prefix) != os.path.realpath(VENV) and \
            os.access(VENV_PYTHON, os.X_OK):
        os.execv(VENV_PYTHON, [VENV_PYTHON] + sys.argv)
    sys.stderr.write("no PyTorch: run scripts/setup/python_venv.sh torch "
                     "(it makes %s)\n" % VENV_PYTHON)
    sys.exit(1 if os.environ.get("CI") else testlib.SKIPPED_ALL)


_reexec_with_torch()
sys.path.insert(0, PYTHON_DIR)
import torch  # noqa: E402
import shardps  # noqa: E402
import shardps.torch  # noqa: E402


def python_env(**extra):
    env = testlib.clean_env(**extra)
    env["PYTHONPATH"] = PYTHON_DIR
    return env


class PythonTorchTest(testlib.ProcessTestCase):

    def setUp(self):
        super().setUp()
        self._jobs = []

    def tearDown(self):
        for j in self._jobs:
            j.abandon()
        super().tearDown()

    def job(self, port, **kwargs):
        kwargs.setdefault("trainer_id", 0)
        kwargs.setdefault("num_trainers", 1)
        kwargs.setdefault("progress", "off")
        j = shardps.Job(pservers="127.0.0.1:%d" % port, **kwargs)
        self._jobs.append(j)
        return j

    def example(self, name, ports, k, n, args, script=EXAMPLE):
        log = os.path.join(self.tmp, name + ".log")
        with open(log, "ab") as f:
            return self.popen(
                [VENV_PYTHON, script,
                 "--pservers=" + ",".join("127.0.0.1:%d" % p for p in ports),
                 "--trainer_id=%d" % k, "--num_trainers=%d" % n,
                 "--progress=off", "--log_every_steps=10"] + list(args),
                stdout=f, stderr=subprocess.STDOUT, env=python_env())

    def text(self, name):
        with open(os.path.join(self.tmp, name + ".log"),
                  errors="replace") as f:
            return f.read()

    def wait_ok(self, name, p, timeout=240):
        try:
            code = p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail("%s still running after %d s:\n%s" % (
                name, timeout, self.text(name)[-3000:]))
        self.assertEqual(code, 0, self.text(name)[-3000:])

    # Dense ----------------------------------------------------------------

    def test_mlp_two_sync_trainers_equal_one_torch_process(self):
        """2 sync trainers of batch 32 (records i % 2) on 2 pservers, 50
        steps, against one plain PyTorch process of batch 64 with
        torch.optim.SGD(lr=0.05, momentum=0.9): the parameters agree to
        1e-6, and training moved them."""
        plain = os.path.join(self.tmp, "plain.pt")
        mine = os.path.join(self.tmp, "shardps.pt")
        r = subprocess.run(
            [VENV_PYTHON, EXAMPLE, "--plain", "--batch_size=64",
             "--max_steps=50", "--save_params=" + plain],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, env=python_env(), timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:])
        ports = [self.start_pserver("ps%d" % i, num_trainers=2)[1]
                 for i in range(2)]
        # Trainer 0 (which saves) copies through host buffers as on a GPU;
        # trainer 1 pushes each layer's gradient from backward.
        trainers = [self.example("t%d" % k, ports, k, 2,
                                 ["--batch_size=32", "--max_steps=50",
                                  "--save_params=" + mine] +
                                 [["--stage_on_host"],
                                  ["--push_in_backward"]][k])
                    for k in (0, 1)]
        for k, t in enumerate(trainers):
            self.wait_ok("t%d" % k, t)
        a, b = torch.load(plain), torch.load(mine)
        self.assertEqual(sorted(a), sorted(b))
        start = shardps_free_init()
        diff = max((a[n] - b[n]).abs().max().item() for n in a)
        moved = max((a[n] - start[n]).abs().max().item() for n in a)
        sys.stderr.write("[max |plain - shardps| %.2e, moved %.3f] " %
                         (diff, moved))
        self.assertLess(diff, 1e-6)
        self.assertGreater(moved, 0.05)
        self.assertIn("dense values through shared memory with 2",
                      self.text("t0"))

    # Sparse ---------------------------------------------------------------

    def sharded_embedding(self, job, kind, mode, dim, storage="float32"):
        """Table "emb" of `job` as a ShardedEmbeddingBag ("bag", of `mode`)
        or a ShardedEmbedding, with the pservers' Adagrad."""
        adagrad = shardps.optim.Adagrad(lr=0.1, initial_accumulator_value=0.1)
        if kind == "bag":
            return shardps.torch.ShardedEmbeddingBag(
                job, "emb", dim, adagrad, init=("uniform", 0.5), mode=mode,
                storage=storage)
        return shardps.torch.ShardedEmbedding(job, "emb", dim, adagrad,
                                              init=("uniform", 0.5),
                                              storage=storage)

    def sparse_against_torch(self, port, kind, mode=None, weights=False,
                             prefetch=False, storage="float32"):
        """20 steps of a ShardedEmbeddingBag / ShardedEmbedding against
        its torch namesake with torch.optim.Adagrad; returns the largest
        difference of the rows and of the losses. `prefetch`: the next
        batch's rows come with each push, except every fourth step's,
        where other ids are asked for (the forward then pulls)."""
        job = self.job(port)
        dim, steps = 8, 20
        emb = self.sharded_embedding(job, kind, mode, dim, storage)
        head = torch.nn.Linear(dim, 1)
        opt = shardps.torch.DistributedOptimizer(
            head, job, shardps.optim.SGD(lr=0.05))
        vocab, batches, targets, per_sample = random_sparse_batches(steps)
        # The reference: torch modules from the same start.
        start_rows = embedding_rows(emb, kind, vocab, dim)
        index = {int(v): i for i, v in enumerate(vocab)}
        ref, ref_head, ref_opts = torch_twin(kind, mode, start_rows, head)
        loss_diff = 0.0
        for s in range(steps):
            ids = batches[s]
            local = torch.tensor([[index[int(v)] for v in row]
                                  for row in ids])
            w = per_sample[s] if weights else None
            loss = sparse_loss(emb, head, kind, ids, w, targets[s])
            ref_loss = sparse_loss(ref, ref_head, kind, local, w, targets[s])
            loss_diff = max(loss_diff, abs(loss.item() - ref_loss.item()))
            opt.zero_grad()
            loss.backward()
            if prefetch and s + 1 < steps:
                emb.prefetch(batches[s + 1] if s % 4 != 2 else vocab[:7])
            opt.step(loss=loss)
            for o in ref_opts:
                o.zero_grad()
            ref_loss.backward()
            for o in ref_opts:
                o.step()
        rows = embedding_rows(emb, kind, vocab, dim)
        row_diff = (rows - ref.weight).abs().max().item()
        moved = (rows - start_rows).abs().max().item()
        self.assertGreater(moved, 0.01, "training moved no row")
        if prefetch:  # pulled: steps 0, 3, 7, 11, 15, 19 and the 2 reads
            self.assertEqual(emb.stats, {"prefetched_forwards": 14,
                                         "pulled_forwards": 6 + 2})
        job.finish()
        return row_diff, loss_diff

    def test_embedding_bag_sum_with_weights_equals_torch(self):
        _, port, _ = self.start_pserver("ps")
        rows, loss = self.sparse_against_torch(port, "bag", "sum", True)
        sys.stderr.write("[rows %.1e, loss %.1e] " % (rows, loss))
        self.assertLess(rows, 1e-6)
        self.assertLess(loss, 1e-5)

    def test_embedding_bag_mean_equals_torch(self):
        _, port, _ = self.start_pserver("ps")
        rows, loss = self.sparse_against_torch(port, "bag", "mean")
        self.assertLess(rows, 1e-6)
        self.assertLess(loss, 1e-5)

    def test_bf16_rows_follow_torch_within_bf16s_rounding(self):
        """Rows held in bf16 (8 bits of precision, stochastic rounding)
        train as float32 torch does, to a few of bf16's steps (2^-9 at
        0.5), not exactly."""
        _, port, _ = self.start_pserver("ps")
        rows, loss = self.sparse_against_torch(port, "bag", "mean",
                                               storage="bf16")
        sys.stderr.write("[rows %.1e, loss %.1e] " % (rows, loss))
        self.assertLess(rows, 0.02)
        self.assertGreater(rows, 1e-6)  # they are rounded
        self.assertLess(loss, 0.01)

    def test_disk_tier_trains_as_memory_does(self):
        """A ShardedEmbeddingBag(disk=4) on a pserver with
        --sparse_store_dir, whose 5,700 rows of 64 floats need about twice
        what its 4 MiB cache holds (1.5 MiB of it for rows), trains to
        exactly the rows of the same table on a pserver without a limit,
        with rows written to disk and read back; bad disk and eviction
        arguments raise, naming them."""
        store = os.path.join(self.tmp, "rows")
        disk_ps, disk_port, _ = self.start_pserver(
            "disk", extra=["--sparse_store_dir=" + store,
                           "--max_memory_mb=16"])
        _, mem_port, _ = self.start_pserver("mem")
        g = torch.Generator().manual_seed(5)
        vocab = torch.randint(-2**62, 2**62, (12000,), generator=g)
        twins = []
        for port, disk in ((disk_port, 4), (mem_port, None)):
            job = self.job(port)
            emb = shardps.torch.ShardedEmbeddingBag(
                job, "emb", 64, shardps.optim.Adagrad(lr=0.1),
                init=("uniform", 0.5), disk=disk)
            head = torch.nn.Linear(64, 1)
            torch.nn.init.constant_(head.weight, 0.1)
            torch.nn.init.constant_(head.bias, 0.0)
            opt = shardps.torch.DistributedOptimizer(
                head, job, shardps.optim.SGD(lr=0.05))
            twins.append((job, emb, head, opt))
        for step in range(12):
            bags = vocab[torch.randint(0, len(vocab), (100, 5),
                                       generator=g)]
            target = torch.randn(100, 1, generator=g)
            for job, emb, head, opt in twins:
                loss = ((head(emb(bags)) - target) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step(loss=loss)
        disk_rows, mem_rows = (embedding_rows(t[1], "bag", vocab, 64)
                               for t in twins)
        differ = (disk_rows != mem_rows).any(dim=1)
        self.assertFalse(differ.any(), "%d rows differ, by up to %g:\n%s" % (
            differ.sum().item(), (disk_rows - mem_rows).abs().max().item(),
            self.text("disk")[-3000:]))
        for t in twins:
            t[0].finish()
        disk_ps.terminate()  # it logs its tables' counters as it stops
        self.assertEqual(disk_ps.wait(60), 0)
        line = wait_for(lambda: re.search(
            r"(\d+) on disk \((\d+) written there, (\d+) read back, 0 disk",
            self.text("disk")), 30)
        self.assertTrue(line, self.text("disk")[-3000:])
        on_disk, written, read = (int(x) for x in line.groups())
        sys.stderr.write("[%d rows on disk, %d written, %d read] " %
                         (on_disk, written, read))
        self.assertGreater(on_disk, 1500)
        self.assertGreater(read, 0)
        self.check_bad_disk_arguments(mem_port)

    def check_bad_disk_arguments(self, port):
        job = self.job(port, job_id="bad")
        adagrad = shardps.optim.Adagrad(lr=0.1)
        for kwargs, message in (
                (dict(disk=2), "disk must be None, True or the memory "
                 "cache's MiB \\(at least 4\\), got 2"),
                (dict(disk="yes"), "disk must be .*got 'yes'"),
                (dict(eviction="ttl"), "eviction must be None, 'lru' or "
                 "'lfu', got 'ttl'")):
            with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                        message):
                shardps.torch.ShardedEmbedding(job, "emb", 4, adagrad,
                                               **kwargs)
        shardps.torch.ShardedEmbedding(job, "emb", 4, adagrad, disk=True)
        with self.assertRaisesRegex(shardps.FailedPreconditionError,
                                    "--sparse_store_dir"):
            shardps.torch.DistributedOptimizer(torch.nn.Linear(4, 1), job,
                                               shardps.optim.SGD(lr=0.1))

    def test_embedding_equals_torch(self):
        _, port, _ = self.start_pserver("ps")
        rows, loss = self.sparse_against_torch(port, "one")
        self.assertLess(rows, 1e-6)
        self.assertLess(loss, 1e-5)

    def test_prefetched_rows_equal_torch(self):
        """The next batch's rows fetched with the push (prefetch) train
        as rows pulled in the forward do."""
        _, port, _ = self.start_pserver("ps")
        rows, loss = self.sparse_against_torch(port, "bag", "sum", True,
                                               prefetch=True)
        self.assertLess(rows, 1e-6)
        self.assertLess(loss, 1e-5)

    def train_dense(self, name, steps=30, opt_args=None, **flags):
        """`steps` steps of a 100-64-2 model on fixed random data, alone on
        a new pserver (DistributedOptimizer given `opt_args`); returns the
        job and its losses."""
        _, port, _ = self.start_pserver(name)
        job = self.job(port, batch_size=32, **flags)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 2))
        opt = shardps.torch.DistributedOptimizer(
            model, job, shardps.optim.Momentum(lr=0.1, momentum=0.9),
            **(opt_args or {}))
        g = torch.Generator().manual_seed(1)
        x = torch.randn(256, 100, generator=g)
        y = (x[:, 0] + x[:, 1] > 0).long()
        losses = []
        for s in range(steps):
            i = (s * 32) % 256
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[i:i + 32]),
                                                     y[i:i + 32])
            loss.backward()
            opt.step(loss=loss)
            losses.append(loss.item())
        return job, losses

    def test_push_in_backward(self):
        """Gradients pushed from backward hooks train as step()'s pushes
        do, to the last digit; a second backward in a step, and threshold
        compression, are refused naming why."""
        _, hooked = self.train_dense("ps-hooks", steps=12,
                                     opt_args={"push_in_backward": True})
        _, plain = self.train_dense("ps-plain", steps=12)
        self.assertEqual(hooked, plain)
        _, port, _ = self.start_pserver("ps-twice")
        job = self.job(port, job_id="twice")
        model = torch.nn.Linear(4, 1)
        shardps.torch.DistributedOptimizer(
            model, job, shardps.optim.SGD(lr=0.1), push_in_backward=True)
        model(torch.ones(2, 4)).sum().backward()
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "pushed already at step 0"):
            model(torch.ones(2, 4)).sum().backward()
        with self.assertRaisesRegex(shardps.FailedPreconditionError,
                                    "threshold"):
            self.train_dense("ps-threshold", steps=1,
                             opt_args={"push_in_backward": True},
                             compression="threshold")

    def test_compression_and_metrics(self):
        """--compression from Python: fp16 pushes about half the bytes of
        float32, threshold far fewer, and each job trains (the loss of the
        last 8 steps is below that of the first 8). /metrics
        (monitoring_port=0) counts the job's steps and pushed bytes."""
        import urllib.request
        got = {}
        for c in ("none", "fp16", "threshold"):
            flags = {"monitoring_port": 0} if c == "none" else {
                "compression": c}
            job, losses = self.train_dense("ps-" + c, **flags)
            got[c] = job.push_bytes
            self.assertLess(sum(losses[-8:]), sum(losses[:8]) * 0.8,
                            "%s: %s" % (c, losses))
            if c == "none":
                self.assertGreater(job.monitoring_port, 0)
                metrics = urllib.request.urlopen(
                    "http://127.0.0.1:%d/metrics" % job.monitoring_port,
                    timeout=10).read().decode()
                self.assertRegex(metrics,
                                 r"(?m)^shardps_trainer_steps_total\S* 30$")
                self.assertRegex(
                    metrics, r"(?m)^shardps_trainer_pushed_bytes_total\S* %d$"
                    % job.push_bytes)
            job.finish()
        sys.stderr.write("[pushed bytes %s] " % got)
        self.assertLess(got["fp16"], got["none"] * 0.55)
        self.assertGreater(got["fp16"], got["none"] * 0.45)
        self.assertLess(got["threshold"], got["none"] * 0.25)

    def deepfm_job(self, name, data, args=((), ())):
        """examples/torch_deepfm.py, 2 sync trainers (trainer k given
        args[k]) on 2 new pservers, 1 pass; returns trainer 0's RESULT."""
        ports = [self.start_pserver("%s-ps%d" % (name, i), num_trainers=2)[1]
                 for i in range(2)]
        trainers = [
            self.example("%s-t%d" % (name, k), ports, k, 2,
                         ["--train=" + data + "/train",
                          "--test=" + data + "/test"] + list(args[k]),
                         script=DEEPFM)
            for k in (0, 1)]
        for k, t in enumerate(trainers):
            self.wait_ok("%s-t%d" % (name, k), t)
        results = [l for l in self.text(name + "-t0").splitlines()
                   if l.startswith("RESULT ")]
        self.assertTrue(results, self.text(name + "-t0")[-3000:])
        return json.loads(results[-1][len("RESULT "):])["passes"][-1]

    def test_deepfm_prefetch_trains_as_pulls_do(self):
        """examples/torch_deepfm.py on 20,000 generated CTR records: with
        the next batch's rows prefetched (the default, trainer 0 also
        through host buffers as on a GPU) and with --no_prefetch, the sync
        job ends with the same test AUC and log loss, to the last digit."""
        data = os.path.join(self.tmp, "ctr")
        os.mkdir(data)
        subprocess.run([os.path.join(testlib.BIN_DIR, "tools",
                                     "gen_ctr_data"), "--field_in_high_bits",
                        "--num_train=20000", "--num_test=4000",
                        "--train_out=" + data + "/train",
                        "--test_out=" + data + "/test"],
                       check=True, capture_output=True, timeout=120)
        fetched = self.deepfm_job("pre", data, (["--stage_on_host"], []))
        pulled = self.deepfm_job("pull", data,
                                 (["--no_prefetch"], ["--no_prefetch"]))
        self.assertEqual(fetched["step"], 39)
        self.assertEqual(fetched["test_auc"], pulled["test_auc"])
        self.assertEqual(fetched["test_logloss"], pulled["test_logloss"])
        self.assertGreater(fetched["test_auc"], 0.55)  # 0.5: chance

    def test_save_dir_and_load_dir(self):
        """--save_dir: the chief's finish() writes the dense tables as a
        saved model; --load_dir starts another job from it, and a model
        whose tables differ is refused naming the table."""
        _, port, _ = self.start_pserver("ps")
        saved = os.path.join(self.tmp, "saved")
        job = self.job(port, job_id="a", save_dir=saved)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                                    torch.nn.Linear(4, 1))
        opt = shardps.torch.DistributedOptimizer(
            model, job, shardps.optim.Adam(lr=0.01))
        x, y = torch.randn(16, 3), torch.randn(16, 1)
        for _ in range(5):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step(loss=loss)
        job.finish()
        self.assertTrue(os.path.isfile(os.path.join(saved, "params.bin")))
        again = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(),
                                    torch.nn.Linear(4, 1))
        job_b = self.job(port, job_id="b", load_dir=saved)
        shardps.torch.DistributedOptimizer(again, job_b,
                                           shardps.optim.SGD(lr=0.1))
        for a, b in zip(model.parameters(), again.parameters()):
            self.assertTrue(torch.equal(a, b))
        job_b.finish()
        other = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(),
                                    torch.nn.Linear(5, 1))
        job_c = self.job(port, job_id="c", load_dir=saved)
        with self.assertRaisesRegex(shardps.FailedPreconditionError,
                                    "'0.weight' with 12 values; the model "
                                    "expects '0.weight' with 15"):
            shardps.torch.DistributedOptimizer(other, job_c,
                                               shardps.optim.SGD(lr=0.1))

    # Faults ---------------------------------------------------------------

    def replicated_job(self, run, kill_at_step=None):
        """3 pservers, 2 Python trainers (torch_mlp.py, 1 pass of batch 64)
        with --replication=2; with kill_at_step, SIGKILL pserver 1 once
        trainer 0 has reported that step. Returns trainer 0's final eval."""
        servers = [self.start_pserver("%s-ps%d" % (run, i), num_trainers=2)
                   for i in range(3)]
        ports = [port for _, port, _ in servers]
        metrics = [os.path.join(self.tmp, "%s-t%d.jsonl" % (run, k))
                   for k in (0, 1)]
        trainers = [self.example("%s-t%d" % (run, k), ports, k, 2,
                                 ["--num_passes=1", "--replication=2",
                                  "--metrics_file=" + metrics[k]])
                    for k in (0, 1)]

        def step():
            steps = [l["step"] for l in read_json_lines(metrics[0])
                     if l.get("event") == "step"]
            return steps[-1] if steps else 0

        if kill_at_step is not None:
            self.assertTrue(wait_for(lambda: step() >= kill_at_step, 120),
                            self.text(run + "-t0")[-2000:])
            servers[1][0].send_signal(signal.SIGKILL)
        for k, t in enumerate(trainers):
            self.wait_ok("%s-t%d" % (run, k), t)
        for i, (p, _, _) in enumerate(servers):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
        evals = [[l for l in read_json_lines(m) if l.get("event") == "eval"]
                 for m in metrics]
        self.assertEqual(evals[0][-1]["test_accuracy"],
                         evals[1][-1]["test_accuracy"])
        return evals[0][-1]

    def test_pserver_killed_under_replication(self):
        """Sync, --replication=2: kill -9 pserver 1 at step 150 of 468 and
        never restart it. Both trainers finish, their shards failed over,
        with the test accuracy and loss of the same job without the
        failure."""
        base = self.replicated_job("base")
        killed = self.replicated_job("kill", kill_at_step=150)
        self.assertEqual(killed["step"], 468)
        self.assertEqual(killed["test_accuracy"], base["test_accuracy"])
        self.assertEqual(killed["test_loss"], base["test_loss"])
        self.assertGreater(base["test_accuracy"], 0.75)
        for k in (0, 1):
            self.assertIn("failover from pserver 1", self.text("kill-t%d" % k))

    # Refusals -------------------------------------------------------------

    def check_bad_job_arguments(self, port):
        """Flags a shardps.Job refuses, naming them."""
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "unknown flag --no_such_flag"):
            self.job(port, no_such_flag=1)
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "--mode=lockstep: must be sync or async"):
            self.job(port, mode="lockstep")
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "--config and --config_set are the "
                                    "trainer binary's"):
            self.job(port, config="configs/fmnist_mlp.pbtxt")

    def check_bad_optimizers(self, chief, model):
        """A torch optimizer, float64 parameters and out-of-range
        hyperparameters are refused, naming them."""
        with self.assertRaisesRegex(TypeError, "shardps.optim optimizer"):
            shardps.torch.DistributedOptimizer(
                model, chief, torch.optim.SGD(model.parameters(), lr=0.1))
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "parameter weight is torch.float64"):
            shardps.torch.DistributedOptimizer(
                torch.nn.Linear(4, 2).double(), chief,
                shardps.optim.SGD(lr=0.1))
        with self.assertRaisesRegex(ValueError, "lr must be > 0"):
            shardps.optim.Momentum(lr=-1)
        with self.assertRaisesRegex(ValueError, "initial_accumulator_value"):
            shardps.optim.Adagrad(lr=0.1, initial_accumulator_value=0)

    def check_bad_ids(self, emb):
        """Ids that are not an int64 tensor are refused, naming why."""
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "ids must be int64"):
            emb(torch.tensor([[0.5, 1.5]]))
        with self.assertRaisesRegex(TypeError, "ids must be a tensor"):
            emb([[1, 2]])

    def test_bad_arguments_raise_and_change_nothing(self):
        """Each bad argument raises an exception naming it; the job the
        chief made is unchanged, and the right second trainer then trains
        with it."""
        _, port, _ = self.start_pserver("ps", num_trainers=2)
        self.check_bad_job_arguments(port)
        chief = self.job(port, num_trainers=2)
        model = torch.nn.Linear(4, 2)
        self.check_bad_optimizers(chief, model)
        emb = shardps.torch.ShardedEmbeddingBag(chief, "emb", 4,
                                                shardps.optim.SGD(lr=0.1))
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "storage must be 'float32', "
                                    "'bf16' or 'fp16', got 'half'"):
            shardps.torch.ShardedEmbeddingBag(chief, "emb2", 4,
                                              shardps.optim.SGD(lr=0.1),
                                              storage="half")
        with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                    "table emb is added twice"):
            shardps.torch.ShardedEmbeddingBag(chief, "emb", 4,
                                              shardps.optim.SGD(lr=0.1))
        # The chief starts the job in a thread: it waits for trainer 1.
        import threading
        started = {}

        def start_chief():
            torch.manual_seed(0)
            started["opt"] = shardps.torch.DistributedOptimizer(
                model, chief, shardps.optim.SGD(lr=0.1))

        t = threading.Thread(target=start_chief)
        t.start()
        other = self.job(port, trainer_id=1, num_trainers=2,
                         ready_timeout_s=5)
        with self.assertRaisesRegex(shardps.FailedPreconditionError,
                                    "table|shape"):
            shardps.torch.DistributedOptimizer(
                torch.nn.Linear(4, 3), other, shardps.optim.SGD(lr=0.1))
        # The right trainer 1 joins the job the chief made.
        right = self.job(port, trainer_id=1, num_trainers=2)
        shardps.torch.ShardedEmbeddingBag(right, "emb", 4,
                                          shardps.optim.SGD(lr=0.1))
        right_model = torch.nn.Linear(4, 2)
        right_opt = shardps.torch.DistributedOptimizer(
            right_model, right, shardps.optim.SGD(lr=0.1))
        t.join(60)
        self.assertFalse(t.is_alive())
        self.assertTrue(torch.equal(right_model.weight, model.weight))
        self.check_bad_ids(emb)
        for j in (chief, right):
            j.finish()
        del right_opt

    def test_torchrun_variables_place_the_trainer(self):
        """RANK and WORLD_SIZE (torchrun) give the trainer id and count when
        no argument does; an argument wins."""
        saved = dict(os.environ)
        try:
            os.environ.update(RANK="1", WORLD_SIZE="3")
            j = shardps.Job(pservers="127.0.0.1:1")
            self.assertEqual((j.trainer_id, j.num_trainers), (1, 3))
            j = shardps.Job(pservers="127.0.0.1:1", trainer_id=2)
            self.assertEqual((j.trainer_id, j.num_trainers), (2, 3))
            os.environ["RANK"] = "x"
            with self.assertRaisesRegex(shardps.InvalidArgumentError,
                                        "RANK=x"):
                shardps.Job(pservers="127.0.0.1:1")
        finally:
            os.environ.clear()
            os.environ.update(saved)


class TorchrunTest(testlib.ProcessTestCase):

    def test_torchrun_starts_the_trainers(self):
        """torchrun --standalone --nproc_per_node=2 examples/torch_mlp.py
        with only --pservers: torchrun's RANK and WORLD_SIZE make trainers
        0 and 1 of 2, which train one job to the same accuracy."""
        _, port, _ = self.start_pserver("ps", num_trainers=2)
        torchrun = os.path.join(VENV, "bin", "torchrun")
        log = os.path.join(self.tmp, "torchrun.log")
        with open(log, "wb") as f:
            p = self.popen([torchrun, "--standalone", "--nproc_per_node=2",
                            EXAMPLE, "--pservers=127.0.0.1:%d" % port,
                            "--max_steps=30", "--progress=off"],
                           stdout=f, stderr=subprocess.STDOUT,
                           env=python_env())
            code = p.wait(180)
        with open(log, errors="replace") as f:
            text = f.read()
        self.assertEqual(code, 0, text[-3000:])
        results = [json.loads(l[len("RESULT "):]) for l in text.splitlines()
                   if l.startswith("RESULT ")]
        self.assertEqual(sorted(r["trainer_id"] for r in results), [0, 1])
        accuracy = {r["passes"][-1]["test_accuracy"] for r in results}
        self.assertEqual(len(accuracy), 1, results)
        self.assertIn("trainer 1/2", text)


def random_sparse_batches(steps, bags=16, length=5):
    """`steps` batches of `bags` bags of `length` ids drawn from 40 64-bit
    ids (some negative as int64: hashed features), with repeats within and
    across bags, from seed 3; returns (the 40 ids, the batches, a target
    per bag and a weight per id of each batch)."""
    g = torch.Generator().manual_seed(3)
    vocab = torch.randint(-2**62, 2**62, (40,), generator=g)
    batches = [vocab[torch.randint(0, 40, (bags, length), generator=g)]
               for _ in range(steps)]
    targets = [torch.randn(bags, 1, generator=g) for _ in range(steps)]
    per_sample = [torch.rand(bags, length, generator=g)
                  for _ in range(steps)]
    return vocab, batches, targets, per_sample


def embedding_rows(emb, kind, vocab, dim):
    """The rows of the ids `vocab` in `emb` (a bag of each id alone for
    "bag"), read without gradients, one per id."""
    with torch.no_grad():
        rows = emb(vocab[:, None]) if kind == "bag" else emb(vocab)
    return rows.reshape(len(vocab), dim)


def torch_twin(kind, mode, start_rows, head):
    """torch.nn.EmbeddingBag ("bag", of `mode`) or torch.nn.Embedding
    holding `start_rows`, and a copy of the Linear `head`, with
    torch.optim.Adagrad and SGD as the pservers' optimizers; returns
    (embedding, head, [their optimizers])."""
    rows, dim = start_rows.shape
    if kind == "bag":
        ref = torch.nn.EmbeddingBag(rows, dim, mode=mode)
    else:
        ref = torch.nn.Embedding(rows, dim)
    ref_head = torch.nn.Linear(dim, 1)
    with torch.no_grad():
        ref.weight.copy_(start_rows)
        ref_head.load_state_dict(head.state_dict())
    ref_opt = torch.optim.Adagrad(ref.parameters(), lr=0.1,
                                  initial_accumulator_value=0.1,
                                  eps=1e-10)
    ref_head_opt = torch.optim.SGD(ref_head.parameters(), lr=0.05)
    return ref, ref_head, [ref_opt, ref_head_opt]


def sparse_loss(emb, head, kind, ids, weights, target):
    """The mean squared error of `head` over the bags of `ids` in `emb`
    (weighted by `weights` for "bag"; summed per row otherwise)."""
    if kind == "bag":
        out = emb(ids, per_sample_weights=weights)
    else:
        out = emb(ids).sum(1)
    return ((head(out) - target) ** 2).mean()


def shardps_free_init():
    """torch_mlp.py's initial parameters (PyTorch's, seed 1)."""
    torch.manual_seed(1)
    from torch import nn
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                      nn.ReLU(), nn.Linear(128, 10))
    return {n: p.detach().clone() for n, p in m.named_parameters()}


if __name__ == "__main__":
    testlib.main()
