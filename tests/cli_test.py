#!/usr/bin/env python3
"""Command line, environment and signals of the pserver and trainer binaries.

Bad input must stop a program at start with exit status 2 and one line that
names the flag, variable or file. Flags come from the command line, then
SHARDPS_<FLAG>, then (trainer id and count) the scheduler's variables.

    python3 tests/cli_test.py [--bin_dir build] [-k pattern]
"""

import os
import signal
import socket
import subprocess
import sys
import time

import testlib
from testlib import clean_env, pserver_bin, trainer_bin

# How long a program may take to refuse bad input. Refusals happen before
# any data is loaded or any connection is made, in well under a second; a
# program still running after this is waiting for a pserver, i.e. it
# accepted the input.
REFUSAL_TIMEOUT_S = 10


class Refusal(object):
    def __init__(self, returncode, stderr, stdout, timeout):
        self.timeout = timeout
        self.returncode = returncode  # None: still running at the timeout
        self.stderr = stderr
        self.stdout = stdout
        self.lines = [l for l in stderr.splitlines() if l.strip()]


def run(argv, env=None, timeout=REFUSAL_TIMEOUT_S):
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True,
                           env=env if env is not None else clean_env(),
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        def text(x):
            if isinstance(x, bytes):
                return x.decode("utf-8", "replace")
            return x or ""
        return Refusal(None, text(e.stderr), text(e.stdout), timeout)
    return Refusal(r.returncode, r.stderr, r.stdout, timeout)


def trainer_bin_argv(*flags):
    """A valid trainer command line, changed by `flags` (a flag given twice:
    the last wins)."""
    return [trainer_bin(), "--pservers=127.0.0.1:1", "--trainer_id=0",
            "--num_gradient_servers=2", "--config=" + testlib.CONFIG
            ] + list(flags)


def trainer(*flags, **env):
    """Runs trainer_bin_argv(*flags) in the environment `env`."""
    return run(trainer_bin_argv(*flags), env=clean_env(**env))


def trainer_bare(*flags, **env):
    """Runs the trainer with exactly `flags`."""
    return run([trainer_bin()] + list(flags), env=clean_env(**env))


class CliTest(testlib.ProcessTestCase):

    def assertRefused(self, r, *must_contain, prefix=None, code=2):
        """Exit `code`, exactly one line on stderr, naming what is wrong."""
        self.assertIsNotNone(
            r.returncode, "still running after %d s: the bad input was "
            "accepted; stderr:\n%s" % (r.timeout, r.stderr))
        self.assertEqual(r.returncode, code, "stderr:\n" + r.stderr)
        self.assertEqual(len(r.lines), 1,
                         "want one line on stderr, got:\n" + r.stderr)
        line = r.lines[0]
        if prefix:
            self.assertTrue(line.startswith(prefix + ": "), line)
        for s in must_contain:
            self.assertIn(s, line)
        return line

    # pserver ---------------------------------------------------------------

    def assertOwnHelp(self, r, program, first_group, flags):
        """--help: exit 0, the program's own flags first and grouped, no
        flag left ungrouped, the libraries' flags behind --helpfull."""
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("usage: " + program + " "),
                        r.stdout)
        self.assertEqual(lines[2], first_group + ":", r.stdout)
        for flag in flags:
            self.assertIn("\n  --" + flag + "=", r.stdout)
        for absent in ("error:", "Other flags", "Flags from", "--logtostderr"):
            self.assertNotIn(absent, r.stdout)
        self.assertNotRegex(r.stdout, r"/[\w/.-]+\.cc")  # no build paths
        self.assertIn("--helpfull", lines[-1])
        self.assertTrue(all(len(l) <= 78 for l in lines[1:]), r.stdout)

    def test_pserver_help_shows_its_own_flags_first(self):
        self.assertOwnHelp(run([pserver_bin(), "--help"]), "pserver", "Server",
                           ["port", "num_gradient_servers", "checkpoint_dir",
                            "auth_token_file", "monitoring_port"])

    def test_trainer_help_shows_its_own_flags_first(self):
        self.assertOwnHelp(run([trainer_bin(), "--help"]), "trainer",
                           "Cluster", ["pservers", "config", "mode",
                                       "compression", "health_port",
                                       "tls_ca_file", "monitoring_port"])

    def test_helpfull_still_lists_the_libraries_flags(self):
        r = run([pserver_bin(), "--helpfull"])
        self.assertIn("-logtostderr", r.stdout + r.stderr)


    def test_pserver_port_out_of_range(self):
        for port in ("70000", "-1", "65536"):
            r = run([pserver_bin(), "--port=" + port])
            self.assertRefused(r, "--port", port, prefix="pserver")

    def test_pserver_bad_port_in_environment(self):
        r = run([pserver_bin()], env=clean_env(SHARDPS_PORT="abc"))
        self.assertRefused(r, "SHARDPS_PORT", "abc", "--port",
                           prefix="pserver")

    def test_pserver_environment_range_checked_too(self):
        r = run([pserver_bin()], env=clean_env(SHARDPS_PORT="70000"))
        self.assertRefused(r, "--port", "70000", prefix="pserver")

    def test_pserver_other_bad_values(self):
        self.assertRefused(run([pserver_bin(), "--num_gradient_servers=-1"]),
                           "--num_gradient_servers", prefix="pserver")
        self.assertRefused(run([pserver_bin(), "--max_pull_wait_s=0"]),
                           "--max_pull_wait_s", prefix="pserver")
        self.assertRefused(run([pserver_bin(), "stray"]), "stray",
                           prefix="pserver")

    def test_pserver_unknown_flag_stops_it(self):
        r = run([pserver_bin(), "--no_such_flag=1"])
        self.assertIsNotNone(r.returncode, "accepted an unknown flag")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no_such_flag", r.stderr)

    def test_pserver_unknown_flag_exit_2_one_line(self):
        self.assertRefused(run([pserver_bin(), "--no_such_flag=1"]),
                           "no_such_flag", prefix="pserver")

    def test_pserver_malformed_flag_value_exit_2(self):
        self.assertRefused(run([pserver_bin(), "--port=abc"]), "--port", "abc",
                           prefix="pserver")

    def test_pserver_port_file_and_sigterm(self):
        p, port, log = self.start_pserver()
        self.assertTrue(1 <= port <= 65535)
        self.assertEqual(
            sorted(os.listdir(self.tmp)), ["ps.log", "ps.port"],
            "the port file is written through a temporary file and renamed")
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        start = time.monotonic()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(10)
        took = time.monotonic() - start
        self.assertEqual(rc, 0)
        self.assertLess(took, 3.0, "SIGTERM should stop the pserver promptly")
        with open(log) as f:
            self.assertIn("shutting down", f.read())

    def test_pserver_sigint_exits_0(self):
        p, port, _ = self.start_pserver()
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(10), 0)

    def test_pserver_port_in_use(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            r = run([pserver_bin(), "--host=127.0.0.1", "--port=%d" % port,
                     "--port_file=" + os.path.join(self.tmp, "p")])
        self.assertIsNotNone(r.returncode, "served on a port in use")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(str(port), r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "p")))

    def test_pserver_refuses_port_of_another_pserver(self):
        _, port, _ = self.start_pserver("first")
        r = run([pserver_bin(), "--host=127.0.0.1", "--port=%d" % port,
                 "--port_file=" + os.path.join(self.tmp, "second.port")],
                timeout=3)
        self.assertIsNotNone(r.returncode,
                             "a second pserver serves on port %d" % port)
        self.assertNotEqual(r.returncode, 0)

    # trainer: flags -----------------------------------------------------------

    def test_trainer_use_gpu_without_a_device(self):
        """--use_gpu on a machine without a usable CUDA device (every machine
        here) stops at start with one line naming the reason."""
        if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
            self.skipTest("this machine has an NVIDIA device")
        line = self.assertRefused(trainer("--use_gpu"),
                                  "--use_gpu: no usable CUDA device (",
                                  prefix="trainer")
        sys.stderr.write("[%s] " % line)
        # --gpu_id does not change that, and needs --use_gpu.
        self.assertRefused(trainer("--use_gpu", "--gpu_id=0"),
                           "--use_gpu: no usable CUDA device",
                           prefix="trainer")
        self.assertRefused(trainer("--gpu_id=0"),
                           "--gpu_id applies to --use_gpu only",
                           prefix="trainer")

    def test_trainer_unknown_flag_stops_it(self):
        r = trainer("--no_such_flag")
        self.assertIsNotNone(r.returncode, "accepted an unknown flag")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no_such_flag", r.stderr)

    def test_trainer_unknown_flag_exit_2_one_line(self):
        self.assertRefused(trainer("--no_such_flag"), "no_such_flag",
                           prefix="trainer")

    def test_trainer_id_out_of_range(self):
        line = self.assertRefused(
            trainer("--trainer_id=2", "--num_gradient_servers=2"),
            "--trainer_id=2", prefix="trainer")
        self.assertIn("[0, 2)", line)
        self.assertRefused(trainer("--trainer_id=-3"), "--trainer_id",
                           prefix="trainer")

    def test_tcp_lane_spin_out_of_range(self):
        for bad in ("-1", "10001"):
            self.assertRefused(trainer("--tcp_lane_spin_us=" + bad),
                               "--tcp_lane_spin_us", prefix="trainer")
            self.assertRefused(
                run([pserver_bin(), "--tcp_lane_spin_us=" + bad]),
                "--tcp_lane_spin_us", prefix="pserver")

    def test_trainer_count_must_be_positive(self):
        self.assertRefused(trainer("--num_gradient_servers=0"),
                           "--num_gradient_servers", prefix="trainer")

    def test_trainer_id_required_with_several_trainers(self):
        r = trainer_bare("--pservers=127.0.0.1:1", "--num_gradient_servers=2",
                         "--config=" + testlib.CONFIG)
        self.assertRefused(r, "--trainer_id", prefix="trainer")

    def test_missing_config(self):
        path = os.path.join(self.tmp, "nope.pbtxt")
        self.assertRefused(trainer("--config=" + path), "--config", path,
                           prefix="trainer")
        self.assertRefused(
            trainer_bare("--pservers=127.0.0.1:1", "--trainer_id=0"),
            "--config", prefix="trainer")

    def test_unreadable_config(self):
        if os.geteuid() == 0:
            self.skipTest("root reads files whatever their mode")
        path = os.path.join(self.tmp, "secret.pbtxt")
        with open(path, "w") as f:
            f.write('name: "x"\n')
        os.chmod(path, 0)
        self.assertRefused(trainer("--config=" + path), "--config", path,
                           prefix="trainer")

    def test_config_that_is_a_directory(self):
        self.assertRefused(trainer("--config=" + self.tmp), "--config",
                           self.tmp, prefix="trainer")

    def test_config_syntax_error_names_line(self):
        path = os.path.join(self.tmp, "bad.pbtxt")
        with open(path, "w") as f:
            f.write('name: "bad"\n'
                    'layers { name: "a" type: FULLY_CONNECTED output_dim: 8 }\n'
                    'layers { name: "b" type: FULLY_CONNECTED output_dim: }\n'
                    'batch_size: 4\n')
        line = self.assertRefused(trainer("--config=" + path), "--config",
                                  path, "line 3", prefix="trainer")
        self.assertNotIn("line 4", line)

    def test_config_unknown_field_names_line(self):
        path = os.path.join(self.tmp, "typo.pbtxt")
        with open(path, "w") as f:
            f.write('name: "typo"\n\nbatch_sise: 4\n')
        self.assertRefused(trainer("--config=" + path), "line 3", "batch_sise",
                           prefix="trainer")

    def test_bad_mode(self):
        self.assertRefused(trainer("--mode=fast"), "--mode", "fast",
                           prefix="trainer")
        self.assertRefused(trainer(SHARDPS_MODE="fast"), "fast",
                           prefix="trainer")

    def test_bad_env_value_names_variable(self):
        self.assertRefused(trainer(SHARDPS_MAX_STEPS="ten"),
                           "SHARDPS_MAX_STEPS", "ten", prefix="trainer")

    def test_max_staleness_needs_async(self):
        self.assertRefused(trainer("--max_staleness=2"), "--max_staleness",
                           prefix="trainer")

    def test_async_pipeline_flags(self):
        self.assertRefused(trainer("--async_prefetch"), "--async_prefetch",
                           "--mode=async", prefix="trainer")
        self.assertRefused(trainer("--async_overlap"), "--async_overlap",
                           "--mode=async", prefix="trainer")
        self.assertRefused(trainer("--mode=async", "--async_overlap",
                                   "--async_prefetch"),
                           "exclude each other", prefix="trainer")

    def test_fault_tolerance_flags(self):
        self.assertRefused(trainer("--checkpoint_every_steps=-1"),
                           "--checkpoint_every_steps", prefix="trainer")
        self.assertRefused(trainer("--heartbeat_interval_s=-1"),
                           "--heartbeat_interval_s", prefix="trainer")
        self.assertRefused(trainer("--replicas_to_aggregate=3"),
                           "--replicas_to_aggregate", prefix="trainer")
        self.assertRefused(trainer("--mode=async",
                                   "--replicas_to_aggregate=1"),
                           "--replicas_to_aggregate", "sync",
                           prefix="trainer")
        self.assertRefused(run([pserver_bin(), "--trainer_timeout=-1"]),
                           "--trainer_timeout", prefix="pserver")
        self.assertRefused(run([pserver_bin(), "--keep_checkpoints=0"]),
                           "--keep_checkpoints", prefix="pserver")

    def test_threshold_flags(self):
        for bad in ("-1", "nan", "inf"):
            self.assertRefused(trainer("--updates_threshold=" + bad),
                               "--updates_threshold", prefix="trainer")

    def test_adapt_optimizer_to_data_refusals(self):
        """sparse_input.adapt_optimizer_to_data: what it cannot adapt stops
        the trainer at start (status 1) with the reason as its last line."""
        both = os.path.join(self.tmp, "both.svm")
        ones = os.path.join(self.tmp, "ones.svm")
        with open(both, "w") as f:
            f.write("1 1:1 2:1\n0 3:1\n")
        with open(ones, "w") as f:
            f.write("1 1:1\n1 3:1\n")
        ctr = ["--config=" + os.path.join(testlib.REPO, "configs",
                                          "ctr_lr.pbtxt"),
               "--test_data=" + both, "--batch_size=1"]
        for flags, why in (
                (ctr + ["--train_data=" + both,
                        "--config_set=optimizer.type=SGD"],
                 "the rule is for ADAGRAD; the model's optimizer is SGD (it is "
                 "the default of every table"),
                (ctr + ["--train_data=" + ones],
                 "2 of the 2 training records are positive"),
                (["--config_set=sparse_input.adapt_optimizer_to_data=true"],
                 "sparse_input needs LIBSVM data")):
            r = trainer(*flags)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertTrue(r.lines[-1].startswith("trainer: "), r.stderr)
            self.assertIn(why, r.lines[-1])

    def test_empty_pservers(self):
        for value in ("", ",", " , "):
            self.assertRefused(trainer("--pservers=" + value), "--pservers",
                               prefix="trainer")

    def test_bad_pserver_address(self):
        for addr in ("127.0.0.1:abc", "127.0.0.1:0", "127.0.0.1:65536",
                     ":7164", "127.0.0.1:1,host:-5"):
            r = trainer("--pservers=" + addr)
            line = self.assertRefused(r, "--pservers", prefix="trainer")
            self.assertTrue(any(a in line for a in addr.split(",")), line)

    def test_bad_pserver_address_with_two_colons(self):
        r = run(trainer_bin_argv("--pservers=a:1:2"), timeout=4)
        self.assertRefused(r, "--pservers", "a:1:2", prefix="trainer")

    # trainer: where the values come from ------------------------------------

    def test_env_sets_flags(self):
        # The trainer count from SHARDPS_NUM_GRADIENT_SERVERS.
        line = self.assertRefused(
            trainer_bare("--pservers=127.0.0.1:1", "--trainer_id=2",
                         "--config=" + testlib.CONFIG,
                         SHARDPS_NUM_GRADIENT_SERVERS="2"),
            "--trainer_id=2", prefix="trainer")
        self.assertIn("[0, 2)", line)
        # Every flag: the whole command line from the environment.
        missing = os.path.join(self.tmp, "from-env.pbtxt")
        self.assertRefused(
            trainer_bare(SHARDPS_PSERVERS="127.0.0.1:1", SHARDPS_TRAINER_ID="0",
                         SHARDPS_NUM_GRADIENT_SERVERS="2",
                         SHARDPS_CONFIG=missing), missing, prefix="trainer")

    def test_command_line_beats_env(self):
        # --num_gradient_servers=3 beats the variable's 2: id 2 is valid, so
        # the trainer goes on to read the config (missing on purpose).
        missing = os.path.join(self.tmp, "missing.pbtxt")
        self.assertRefused(
            trainer_bare("--pservers=127.0.0.1:1", "--trainer_id=2",
                         "--num_gradient_servers=3", "--config=" + missing,
                         SHARDPS_NUM_GRADIENT_SERVERS="2"),
            missing, prefix="trainer")
        # --mode=sync beats a bad SHARDPS_MODE.
        self.assertRefused(
            trainer("--mode=sync", "--config=" + missing, SHARDPS_MODE="fast"),
            missing, prefix="trainer")

    def test_scheduler_gives_id_and_count(self):
        cases = [
            ({"SLURM_PROCID": "3", "SLURM_NTASKS": "2"}, "=3", "[0, 2)"),
            ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "4"}, "=5",
             "[0, 4)"),
            ({"PMI_RANK": "7", "PMI_SIZE": "6"}, "=7", "[0, 6)"),
            # Open MPI's variables come first.
            ({"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "8",
              "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "=9", "[0, 8)"),
            # Kubernetes gives an index only; the count is 1 by default.
            ({"JOB_COMPLETION_INDEX": "1"}, "=1", "[0, 1)"),
        ]
        for env, id_text, range_text in cases:
            with self.subTest(env=env):
                r = trainer_bare("--pservers=127.0.0.1:1",
                                 "--config=" + testlib.CONFIG, **env)
                self.assertRefused(r, id_text, range_text, prefix="trainer")

    def test_flags_and_env_beat_scheduler(self):
        sched = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
        r = trainer_bare("--pservers=127.0.0.1:1", "--trainer_id=4",
                         "--config=" + testlib.CONFIG, **sched)
        self.assertRefused(r, "=4", "[0, 2)", prefix="trainer")
        r = trainer_bare("--pservers=127.0.0.1:1",
                         "--config=" + testlib.CONFIG,
                         SHARDPS_TRAINER_ID="5", **sched)
        self.assertRefused(r, "=5", "[0, 2)", prefix="trainer")
        # SLURM_PROCID=7 is valid with SHARDPS_NUM_GRADIENT_SERVERS=9 (which
        # beats SLURM_NTASKS=2): the trainer gets as far as the (missing)
        # config.
        missing = os.path.join(self.tmp, "x.pbtxt")
        r = trainer_bare("--pservers=127.0.0.1:1", "--config=" + missing,
                         SHARDPS_NUM_GRADIENT_SERVERS="9",
                         **dict(sched, SLURM_PROCID="7"))
        self.assertRefused(r, missing, prefix="trainer")

    def test_bad_scheduler_value(self):
        self.assertRefused(
            trainer_bare("--pservers=127.0.0.1:1", "--config=" + testlib.CONFIG,
                         SLURM_PROCID="x", SLURM_NTASKS="2"),
            "SLURM_PROCID", prefix="trainer")

    def test_scheduler_ranks_train_together(self):
        """Two trainers that know their id and count only from Slurm's
        variables train 5 steps against a real pserver."""
        _, port, _ = self.start_pserver(num_trainers=2)
        procs = []
        for rank in range(2):
            metrics = os.path.join(self.tmp, "m%d.jsonl" % rank)
            log = open(os.path.join(self.tmp, "t%d.log" % rank), "wb")
            procs.append((self.popen(
                [trainer_bin(), "--pservers=127.0.0.1:%d" % port,
                 "--config=" + testlib.CONFIG, "--max_steps=5",
                 "--log_every_steps=1", "--metrics_file=" + metrics],
                env=clean_env(SLURM_PROCID=rank, SLURM_NTASKS=2),
                stdout=log, stderr=subprocess.STDOUT), metrics, log))
        for rank, (p, metrics, log) in enumerate(procs):
            rc = p.wait(60)
            log.close()
            with open(log.name) as f:
                self.assertEqual(rc, 0, f.read())
            lines = testlib.read_json_lines(metrics)
            self.assertTrue(lines)
            self.assertEqual({m["trainer_id"] for m in lines}, {rank})
            steps = [m for m in lines if m["event"] == "step"]
            self.assertEqual([m["step"] for m in steps], [1, 2, 3, 4, 5])
            with open(log.name) as f:
                self.assertIn("trainer %d/2" % rank, f.read())


if __name__ == "__main__":
    testlib.main()
