#!/usr/bin/env python3
"""A real Prometheus (Debian's) scraping a 2-pserver, 2-trainer job, promtool
on both binaries' /metrics, the health service through ps_status --health,
and jobs started from Kubeflow's TF_CONFIG and PaddlePaddle's PADDLE_INIT_*
variables alone.

    python3 tests/monitoring_test.py [--bin_dir build] [-k pattern]

About 40 s on 2 cores. The Prometheus test is skipped, saying why, where
Debian's prometheus is not installed (scripts/setup/setup.sh installs it).
"""

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import testlib
from testlib import CONFIG, clean_env, read_port, wait_for

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()



def tail(path, n=3000):
    with open(path, errors="replace") as f:
        return f.read()[-n:]


def sample(page, series):
    """The value of `series` (name{labels} as written) on a /metrics page."""
    for line in page.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


class MonitoringTest(testlib.ProcessTestCase):

    def start_pserver_monitored(self, name, trainers=2):
        mport = os.path.join(self.tmp, name + ".mport")
        p, port, log = self.start_pserver(
            name, num_trainers=trainers,
            extra=["--monitoring_port=0", "--monitoring_host=127.0.0.1",
                   "--monitoring_port_file=" + mport])
        self.assertTrue(wait_for(lambda: read_port(mport), 10), log)
        return p, port, read_port(mport), log

    def start_trainers(self, pservers, n=2, extra=()):
        trainers = []
        for k in range(n):
            mport = os.path.join(self.tmp, "t%d.mport" % k)
            hport = os.path.join(self.tmp, "t%d.hport" % k)
            log = os.path.join(self.tmp, "t%d.log" % k)
            argv = [testlib.trainer_bin(), "--pservers=" + pservers,
                    "--trainer_id=%d" % k, "--num_gradient_servers=%d" % n,
                    "--config=" + CONFIG, "--mode=sync",
                    "--metrics_file=" + os.path.join(self.tmp, "t%d.jsonl" % k),
                    "--monitoring_port=0", "--monitoring_host=127.0.0.1",
                    "--monitoring_port_file=" + mport, "--health_port=0",
                    "--health_port_file=" + hport] + list(extra)
            with open(log, "wb") as f:
                p = self.popen(argv, stdout=f, stderr=subprocess.STDOUT)
            trainers.append((p, mport, hport, log))
        return trainers

    def ps_status(self, *args):
        return subprocess.run(
            [os.path.join(testlib.BIN_DIR, "tools", "ps_status")] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            universal_newlines=True, env=clean_env(), timeout=30)

    def promtool_check(self, url):
        page = http_get(url)
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=page,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=30)
        self.assertEqual((r.returncode, r.stdout), (0, ""),
                         "promtool on %s" % url)
        return page

    def start_prometheus(self, targets_file):
        port = free_port()
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: shardps\n"
                    "    file_sd_configs:\n"
                    "      - files: ['%s']\n        refresh_interval: 1s\n"
                    % targets_file)
        with open(os.path.join(self.tmp, "prometheus.log"), "wb") as log:
            self.popen([PROMETHEUS, "--config.file=" + config,
                        "--storage.tsdb.path=" + os.path.join(self.tmp, "tsdb"),
                        "--web.listen-address=127.0.0.1:%d" % port],
                       stdout=log, stderr=subprocess.STDOUT)
        base = "http://127.0.0.1:%d" % port

        def ready():
            try:
                return http_get(base + "/-/ready", 1) is not None
            except OSError:
                return False
        self.assertTrue(wait_for(ready, 60), "prometheus did not start")
        return base

    def query(self, base, promql):
        url = base + "/api/v1/query?" + urllib.parse.urlencode(
            {"query": promql})
        answer = json.loads(http_get(url))
        self.assertEqual(answer["status"], "success", answer)
        return [(r["metric"], float(r["value"][1]))
                for r in answer["data"]["result"]]

    def write_targets(self, path, ports):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump([{"targets": ["127.0.0.1:%d" % p for p in ports]}], f)
        os.rename(tmp, path)

    def scrape_pservers(self, ps, targets):
        """Starts Prometheus scraping the /metrics of the pservers `ps`
        (start_pserver_monitored's) listed in `targets`; returns its base
        URL once it has scraped both."""
        self.write_targets(targets, [p[2] for p in ps])
        base = self.start_prometheus(targets)
        self.assertTrue(wait_for(
            lambda: len([v for _, v in self.query(base, "up") if v == 1]) == 2,
            30), "prometheus never scraped both pservers")
        return base

    def start_scraped_trainers(self, ps, targets, base, passes):
        """Starts 2 sync trainers of `passes` passes over TCP on the
        pservers `ps`, adds their /metrics to `targets`; returns (the
        trainers, their metrics ports, their health ports) once Prometheus
        has scraped both training."""
        pservers = ",".join("127.0.0.1:%d" % p[1] for p in ps)
        trainers = self.start_trainers(
            pservers, extra=["--num_passes=%d" % passes,
                             "--shared_memory=false"])
        mports = [wait_for(lambda t=t: read_port(t[1]), 30) for t in trainers]
        hports = [wait_for(lambda t=t: read_port(t[2]), 30) for t in trainers]
        self.assertTrue(all(mports) and all(hports))
        self.write_targets(targets, [p[2] for p in ps] + mports)
        self.assertTrue(wait_for(lambda: len(self.query(
            base, "shardps_trainer_steps_total > 0")) == 2, 60),
            "prometheus never scraped both trainers training")
        return trainers, mports, hports

    def check_trainers_serving(self, mports, hports):
        """Both trainers' health services say SERVING, and trainer 0's
        /metrics passes promtool and says it is ready."""
        health = self.ps_status("--health", "--pservers=" + ",".join(
            "127.0.0.1:%d" % h for h in hports))
        self.assertEqual(health.returncode, 0, health.stdout)
        self.assertEqual(health.stdout.count(": SERVING"), 2, health.stdout)
        trainer_page = self.promtool_check(
            "http://127.0.0.1:%d/metrics" % mports[0])
        self.assertIn('shardps_trainer_ready{job_id="default",'
                      'trainer_id="0"} 1', trainer_page)

    def check_push_queries(self, base):
        """Prometheus's rate of pushed bytes and Push latency over the
        pservers, and that both trainers left."""
        rate = self.query(base, 'sum(rate(shardps_pserver_received_bytes_total'
                                '{method="Push"}[2m]))')
        self.assertEqual(len(rate), 1)
        self.assertGreater(rate[0][1], 0)
        p90 = self.query(base, 'histogram_quantile(0.9, sum by (le) (rate('
                               'shardps_pserver_rpc_duration_seconds_bucket'
                               '{method="Push"}[2m])))')
        self.assertEqual(len(p90), 1)
        self.assertTrue(0 < p90[0][1] < 10, p90)
        sys.stderr.write("prometheus: pushed %.0f bytes/s over 2 min, Push "
                         "latency p90 %.4f s\n" % (rate[0][1], p90[0][1]))
        self.assertEqual(self.query(base, "sum(shardps_pserver_trainers)")[0][1],
                         0, "both trainers left")

    def check_every_pushed_byte_received(self, ps, passes):
        """Every pushed byte a trainer counted, the pservers `ps` received
        (their /metrics, which promtool passes); each table took every
        step."""
        pushed = sum(testlib.final_eval(os.path.join(self.tmp, "t%d.jsonl" % k))
                     ["push_bytes"] for k in range(2))
        received = 0
        for _, _, mport, _ in ps:
            page = self.promtool_check("http://127.0.0.1:%d/metrics" % mport)
            received += sample(page, 'shardps_pserver_received_bytes_total'
                                     '{method="Push"}')
            self.assertEqual(sample(page, 'shardps_pserver_table_steps{'
                                          'job_id="default",table="fc1.weight"}'),
                             468 * passes, page)  # 468 steps a pass
        self.assertEqual(received, pushed)

    def test_prometheus_scrapes_a_job(self):
        if not PROMETHEUS or not PROMTOOL:
            self.skipTest("Debian's prometheus is not installed "
                          "(bash scripts/setup/setup.sh installs it)")
        ps = [self.start_pserver_monitored("ps%d" % i) for i in range(2)]
        targets = os.path.join(self.tmp, "targets.json")
        base = self.scrape_pservers(ps, targets)

        # Six passes over TCP: long enough for a few scrapes of the trainers,
        # and every pushed byte goes through the pservers' byte counters
        # (with shared memory, values bypass them).
        passes = 6
        trainers, mports, hports = self.start_scraped_trainers(
            ps, targets, base, passes)
        self.check_trainers_serving(mports, hports)

        for p, _, _, log in trainers:
            self.assertEqual(p.wait(timeout=240), 0, tail(log))
        time.sleep(2.5)  # a last scrape of the pservers
        self.check_push_queries(base)
        self.check_every_pushed_byte_received(ps, passes)

    def test_health_of_a_pserver_and_of_a_finished_trainer(self):
        _, port, _, _ = self.start_pserver_monitored("ps", trainers=1)
        r = self.ps_status("--health", "--pservers=127.0.0.1:%d" % port)
        self.assertEqual((r.returncode, r.stdout.strip()),
                         (0, "127.0.0.1:%d: SERVING" % port))
        r = self.ps_status("--health", "--timeout_s=1",
                           "--pservers=127.0.0.1:%d" % free_port())
        self.assertEqual(r.returncode, 1)
        self.assertIn("unreachable", r.stdout)

    def test_metrics_listen_where_the_pserver_does(self):
        # No --monitoring_host: /metrics on the pserver's --host
        # (127.0.0.1, start_pserver's), not on every interface.
        p, port, log = self.start_pserver_serving_metrics()
        self.assertIn("# TYPE", http_get("http://127.0.0.1:%d/metrics" % port))
        listening = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f.readlines()[1:]:
                    local, state = line.split()[1], line.split()[3]
                    addr, hexport = local.split(":")
                    if state == "0A" and int(hexport, 16) == port:
                        listening.add(addr)
        self.assertEqual(listening, {"0100007F"}, tail(log))
        self.assertIn("metrics on http://127.0.0.1:%d/metrics" % port,
                      tail(log))

    def start_pserver_serving_metrics(self, extra=()):
        """Starts pserver "ps" with /metrics on a free port and `extra`;
        returns (popen, the /metrics port, its log)."""
        mport = os.path.join(self.tmp, "ps.mport")
        p, _, log = self.start_pserver(
            "ps", extra=["--monitoring_port=0",
                         "--monitoring_port_file=" + mport] + list(extra))
        self.assertTrue(wait_for(lambda: read_port(mport), 10), tail(log))
        return p, read_port(mport), log

    def check_a_scrape_passes_idle_connections(self, url, port, scraper):
        """Three connections that never finish a request hold at most their
        threads, for the request timeout; a scrape still gets through."""
        idle = [socket.create_connection(("127.0.0.1", port))
                for _ in range(3)]
        start = time.time()
        with urllib.request.urlopen(url, context=scraper, timeout=5) as r:
            page = r.read().decode()
            self.assertEqual(r.headers["Content-Type"],
                             "text/plain; version=0.0.4; charset=utf-8")
        self.assertLess(time.time() - start, 2)
        self.assertIn("# TYPE shardps_pserver_rpcs_total counter", page)
        for s in idle:
            s.close()

    def check_tls_refusals(self, url, port, scraper, ca):
        """Another path is 404; a client without a certificate (trusting
        `ca`) and plain HTTP get nothing; the scraper still gets /metrics
        after them."""
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url.replace("/metrics", "/other"),
                                   context=scraper, timeout=5)
        self.assertEqual(e.exception.code, 404)
        # No client certificate: the handshake fails.
        anonymous = ssl.create_default_context(cafile=ca)
        with self.assertRaises((ssl.SSLError, ConnectionError,
                                urllib.error.URLError)):
            urllib.request.urlopen(url, context=anonymous, timeout=5).read()
        # Plain HTTP: no answer.
        with self.assertRaises((ConnectionError, urllib.error.URLError,
                                http.client.HTTPException, socket.timeout)):
            http_get("http://127.0.0.1:%d/metrics" % port, timeout=7)
        # Still serving after all that.
        with urllib.request.urlopen(url, context=scraper, timeout=5) as r:
            self.assertIn("# TYPE", r.read().decode())

    def check_tls_needs_a_certificate(self):
        """--monitoring_tls without a certificate of its own: refused at
        start."""
        r = subprocess.run([testlib.pserver_bin(), "--port=0",
                            "--monitoring_port=0", "--monitoring_tls"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, env=clean_env(),
                           timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--monitoring_tls serves /metrics with this process's "
                      "certificate: give --tls_cert_file and --tls_key_file",
                      r.stdout)

    def test_metrics_over_tls(self):
        """--monitoring_tls: /metrics over HTTPS with the pserver's own
        certificate, and with its --tls_ca_file only for scrapers that
        present a certificate signed by it; plain HTTP and certificate-less
        clients get nothing, half-sent requests do not block a scrape."""
        certs = os.path.join(self.tmp, "certs")
        script = os.path.join(testlib.REPO, "scripts", "cluster",
                              "make_certs.sh")
        subprocess.run(["bash", script, certs],
                       check=True, stdout=subprocess.DEVNULL)
        c = lambda name: os.path.join(certs, name)
        p, port, log = self.start_pserver_serving_metrics(
            ["--monitoring_tls", "--tls_cert_file=" + c("server.pem"),
             "--tls_key_file=" + c("server.key"),
             "--tls_ca_file=" + c("ca.pem")])
        url = "https://127.0.0.1:%d/metrics" % port
        self.assertIn("metrics on https://127.0.0.1:%d/metrics (scrapers "
                      "present a certificate signed by --tls_ca_file)" % port,
                      tail(log))
        scraper = ssl.create_default_context(cafile=c("ca.pem"))
        scraper.load_cert_chain(c("client.pem"), c("client.key"))
        self.check_a_scrape_passes_idle_connections(url, port, scraper)
        self.check_tls_refusals(url, port, scraper, c("ca.pem"))
        p.terminate()
        p.wait(timeout=30)
        self.check_tls_needs_a_certificate()

    def run_job_from_env(self, pserver_env, trainer_env):
        """One pserver and two trainers whose addresses, ids and counts all
        come from the environment; returns the trainers' final evals."""
        log = os.path.join(self.tmp, "ps.log")
        port_file = os.path.join(self.tmp, "ps.port")
        with open(log, "wb") as f:
            self.popen([testlib.pserver_bin(), "--host=127.0.0.1",
                        "--port_file=" + port_file],
                       env=clean_env(**pserver_env), stdout=f,
                       stderr=subprocess.STDOUT)
        self.assertTrue(wait_for(lambda: read_port(port_file), 30), tail(log))
        procs = []
        for k in range(2):
            metrics = os.path.join(self.tmp, "t%d.jsonl" % k)
            env = clean_env(**trainer_env(k))
            procs.append(self.popen(
                [testlib.trainer_bin(), "--config=" + CONFIG,
                 "--max_steps=30", "--metrics_file=" + metrics], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                universal_newlines=True))
        for p in procs:
            out, _ = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, out[-3000:])
        return read_port(port_file), [
            testlib.final_eval(os.path.join(self.tmp, "t%d.jsonl" % k))
            for k in range(2)]

    def test_a_job_from_tf_config(self):
        port = free_port()
        cluster = {"chief": ["t0:2222"], "worker": ["t1:2222"],
                   "ps": ["127.0.0.1:%d" % port]}

        def tf_config(task_type, index):
            return {"TF_CONFIG": json.dumps(
                {"cluster": cluster,
                 "task": {"type": task_type, "index": index}})}
        bound, evals = self.run_job_from_env(
            tf_config("ps", 0),
            lambda k: tf_config("chief" if k == 0 else "worker", 0))
        self.assertEqual(bound, port)
        self.assertEqual([e["trainer_id"] for e in evals], [0, 1])
        self.assertEqual(evals[0]["test_loss"], evals[1]["test_loss"])

    def test_a_job_from_paddle_init_variables(self):
        port = free_port()
        common = {"PADDLE_INIT_PORT": port,
                  "PADDLE_INIT_NUM_GRADIENT_SERVERS": 2}
        bound, evals = self.run_job_from_env(
            common, lambda k: dict(common, PADDLE_INIT_PSERVERS="127.0.0.1",
                                   PADDLE_INIT_TRAINER_ID=k,
                                   PADDLE_INIT_USE_GPU=0,
                                   PADDLE_INIT_TRAINER_COUNT=1))
        self.assertEqual(bound, port)
        self.assertEqual([e["trainer_id"] for e in evals], [0, 1])
        self.assertEqual(evals[0]["step"], 30)


if __name__ == "__main__":
    testlib.main()
