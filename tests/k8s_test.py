#!/usr/bin/env python3
"""The Kubernetes manifests in configs/k8s/, checked without a cluster.

- Schemas: every object of every manifest, and the objects of the
  plaintext/ component applied to them, validate against the OpenAPI
  schemas of Kubernetes 1.31 (the oldest release in which every field used
  is GA: podFailurePolicy, unhealthyPodEvictionPolicy, gRPC probes) and
  1.37, in strict mode (an unknown field fails), with PyPI's
  kubernetes-validate. It runs in the virtualenv that
  scripts/setup/python_venv.sh k8s makes
  (${SHARDPS_VENV:-~/.cache/shardps/venv});
  without it every test here is skipped, saying how to make it.
- Flags: every --flag of a container's command and args, of an exec
  probe's command, and every SHARDPS_* variable must be a flag of that
  binary (as its own --helpxml lists them, binaries from --bin_dir), with a
  value of the flag's type; the binary is then started with that command
  line and environment plus --helpxml, so that its own parser accepts them.
  Other variables must be ones the binaries read (common/launch/flags.cc). A
  self-check makes sure a made-up flag or variable is caught.
- The beside/ layout (a pserver sidecar in each trainer pod) passes the
  same schema, flag and file checks, and its own consistency checks.
- Consistency: the Service selects the StatefulSet's pods, --pservers
  names every pserver pod, the trainer count agrees everywhere, the
  ConfigMap holds configs/fmnist_mlp.pbtxt, file flags point into mounted
  volumes and Secret items, the Prometheus annotations match the metrics
  port, --max_memory_mb fits the memory limit, probes suit TLS.

    python3 tests/k8s_test.py [--bin_dir build] [-k pattern]
"""

import glob
import json
import os
import re
import subprocess
import sys
import unittest
import xml.etree.ElementTree as ET

import testlib

K8S_DIR = os.path.join(testlib.REPO, "configs", "k8s")
BESIDE_DIR = os.path.join(K8S_DIR, "beside")
MODEL_CONFIG = os.path.join(testlib.REPO, "configs", "fmnist_mlp.pbtxt")
# The sources that read variables other than SHARDPS_*: the schedulers'
# (flags.cc) and the launchers' (launch_env.cc, where there is one).
ENV_SOURCES = [os.path.join(testlib.REPO, "common", "launch", f)
               for f in ("flags.cc", "launch_env.cc")]
VENV = os.environ.get("SHARDPS_VENV") or os.path.join(
    os.path.expanduser("~"), ".cache", "shardps", "venv")
VENV_PYTHON = os.path.join(VENV, "bin", "python")
KUBERNETES_VERSIONS = ("1.31.0", "1.37.0")

# The programs a container may run, by file name, and where --bin_dir
# holds them.
BINARIES = {
    "pserver": os.path.join("pserver", "pserver"),
    "trainer": os.path.join("trainer", "trainer"),
    "ps_status": os.path.join("tools", "ps_status"),
}
# What may stand before the program in a command.
WRAPPERS = ("/usr/bin/tini", "--")
# Flags whose value is a file or folder in the container.
PATH_FLAGS = ("auth_token_file", "tls_cert_file", "tls_key_file",
              "tls_ca_file", "config", "checkpoint_dir")
# gRPC's transport buffers and the rest of a pserver beyond --max_memory_mb
# (docs/security.md, "Limits").
PSERVER_OVERHEAD_MIB = 384
JOB_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

# Run inside the virtualenv: YAML files to JSON, or objects to validation
# errors (None where an object validates).
_LOAD = r"""
import json, sys, yaml
out = {}
for path in sys.argv[1:]:
    with open(path) as f:
        out[path] = [d for d in yaml.safe_load_all(f) if d is not None]
json.dump(out, sys.stdout)
"""
_VALIDATE = r"""
import json, sys
import kubernetes_validate as kv
req = json.load(sys.stdin)
out = []
for obj in req["objects"]:
    errors = []
    for version in req["versions"]:
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as e:
            where = "/".join(str(p) for p in e.path)
            errors.append("Kubernetes %s: %s: %s" % (version, where, e.message))
        except (kv.SchemaNotFoundError, kv.VersionNotSupportedError) as e:
            errors.append(e.message)
    out.append(errors)
json.dump(out, sys.stdout)
"""


def venv_missing():
    """Why the validator cannot run, or None."""
    if not os.path.exists(VENV_PYTHON):
        return "no virtualenv at %s" % VENV
    r = subprocess.run([VENV_PYTHON, "-c", "import kubernetes_validate, yaml"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if r.returncode != 0:
        return "%s cannot import kubernetes_validate and yaml: %s" % (
            VENV_PYTHON, r.stdout.strip())
    return None


def run_venv(script, args=(), stdin=None):
    r = subprocess.run([VENV_PYTHON, "-c", script] + list(args),
                       input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("%s failed: %s" % (VENV_PYTHON, r.stderr))
    return json.loads(r.stdout)


# --- JSON patches (RFC 6902), as kustomize applies a Component's ---------

def _pointer(path):
    if not path.startswith("/"):
        raise ValueError("JSON pointer %r does not start with /" % path)
    return [p.replace("~1", "/").replace("~0", "~")
            for p in path[1:].split("/")]


def _walk(doc, parts, path):
    for p in parts:
        if isinstance(doc, list):
            doc = doc[int(p)]
        elif isinstance(doc, dict) and p in doc:
            doc = doc[p]
        else:
            raise ValueError("%s: no %r" % (path, p))
    return doc


def apply_json_patch(doc, ops):
    """`doc` (a JSON value, changed in place) after the operations `ops`
    (add, remove, replace, test); ValueError when one cannot apply or a
    test fails, as kustomize fails."""
    for op in ops:
        kind, path = op["op"], op["path"]
        parts = _pointer(path)
        parent = _walk(doc, parts[:-1], path)
        last = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if index < 0 or index > len(parent) or (
                    kind != "add" and index == len(parent)):
                raise ValueError("%s: index out of range" % path)
        elif not isinstance(parent, dict):
            raise ValueError("%s: not in an object or array" % path)
        elif kind in ("remove", "replace", "test") and last not in parent:
            raise ValueError("%s: no such member" % path)
        key = index if isinstance(parent, list) else last
        if kind == "test":
            if parent[key] != op["value"]:
                raise ValueError("test %s: %r, not %r" %
                                 (path, parent[key], op["value"]))
        elif kind == "remove":
            del parent[key]
        elif kind == "replace":
            parent[key] = op["value"]
        elif kind == "add":
            if isinstance(parent, list):
                parent.insert(key, op["value"])
            else:
                parent[key] = op["value"]
        else:
            raise ValueError("op %r is not used here" % kind)
    return doc


# --- Flags ---------------------------------------------------------------

_FLAG_CACHE = {}


def binary_path(name):
    return os.path.join(testlib.BIN_DIR, BINARIES[name])


def binary_flags(name):
    """{flag: gflags type} of program `name`, from its --helpxml."""
    if name not in _FLAG_CACHE:
        path = binary_path(name)
        if not os.path.exists(path):
            raise AssertionError("%s not built (--bin_dir %s)" %
                                 (path, testlib.BIN_DIR))
        r = subprocess.run([path, "--helpxml"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=testlib.clean_env(),
                           universal_newlines=True, timeout=30)
        root = ET.fromstring(r.stdout)
        flags = {f.findtext("name"): f.findtext("type")
                 for f in root.iter("flag")}
        if "port" not in flags and "pservers" not in flags:
            raise AssertionError("%s --helpxml lists no flag of ours:\n%s" %
                                 (path, r.stdout[:2000]))
        _FLAG_CACHE[name] = flags
    return _FLAG_CACHE[name]


def scheduler_variables():
    """The variables other than SHARDPS_* that the binaries read: the
    quoted upper-case names in common/launch/flags.cc (OMPI_COMM_WORLD_RANK, ...,
    JOB_COMPLETION_INDEX) and common/launch/launch_env.cc (TF_CONFIG, ...)."""
    names = set()
    for path in ENV_SOURCES:
        if os.path.exists(path):
            with open(path) as f:
                names |= set(re.findall(r'"([A-Z][A-Z0-9]*_[A-Z0-9_]*)"',
                                        f.read()))
    names = {n for n in names
             if not n.endswith("_") and not n.startswith("SHARDPS_")}
    if "JOB_COMPLETION_INDEX" not in names:
        raise AssertionError("%s no longer names JOB_COMPLETION_INDEX" %
                             ENV_SOURCES[0])
    return names


def value_error(flag_type, value):
    """Why `value` is no value of a gflags flag of `flag_type`, or None."""
    if flag_type == "bool":
        ok = value.lower() in ("true", "false", "1", "0", "t", "f", "yes",
                               "no", "y", "n")
    elif flag_type in ("int32", "int64", "uint32", "uint64"):
        ok = re.match(r"^[-+]?\d+$" if flag_type.startswith("int")
                      else r"^\+?\d+$", value) is not None
    elif flag_type == "double":
        try:
            float(value)
            ok = True
        except ValueError:
            ok = False
    else:
        ok = True
    return None if ok else "%r is not a %s" % (value, flag_type)


def split_command(argv):
    """(program name, [(flag, value or None)], [errors]) of a container's
    command plus args or an exec probe's command."""
    errors = []
    i = 0
    while i < len(argv) and argv[i] in WRAPPERS:
        i += 1
    if i >= len(argv):
        return None, [], ["no program in %r" % (argv,)]
    program = os.path.basename(argv[i])
    if program not in BINARIES:
        return None, [], ["%r runs %r, not one of %s" %
                          (argv, argv[i], sorted(BINARIES))]
    if not argv[i].startswith("/usr/local/bin/"):
        errors.append("%s: the image has it at /usr/local/bin/%s" %
                      (argv[i], program))
    flags = binary_flags(program)
    out = []
    rest = argv[i + 1:]
    j = 0
    while j < len(rest):
        arg = rest[j]
        j += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            errors.append("%s: argument %r is no flag (the programs take "
                          "none)" % (program, arg))
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        if name not in flags and name.startswith("no") and not eq and \
                flags.get(name[2:]) == "bool":
            out.append((name[2:], "false"))
            continue
        if name not in flags:
            errors.append("%s does not know --%s" % (program, name))
            continue
        if not eq:
            if flags[name] == "bool":
                value = "true"
            elif j < len(rest):
                value = rest[j]
                j += 1
            else:
                errors.append("%s: --%s has no value" % (program, name))
                continue
        problem = value_error(flags[name], value)
        if problem:
            errors.append("%s --%s: %s" % (program, name, problem))
        out.append((name, value))
    return program, out, errors


def env_flags(program, env, known_other):
    """([(flag, value)], [errors]) of a container's environment for
    `program`."""
    flags = binary_flags(program)
    out, errors = [], []
    for e in env:
        name = e.get("name", "")
        if "value" not in e:
            errors.append("%s: only literal values are used here, got %r" %
                          (name, e))
            continue
        value = e["value"]
        if name.startswith("SHARDPS_TEST_"):
            errors.append("%s is a test hook, not for a deployment" % name)
        elif name.startswith("SHARDPS_"):
            flag = name[len("SHARDPS_"):].lower()
            if flag not in flags or name != "SHARDPS_" + flag.upper():
                errors.append("%s names no flag of %s" % (name, program))
                continue
            problem = value_error(flags[flag], value)
            if problem:
                errors.append("%s: %s" % (name, problem))
            out.append((flag, value))
        elif name not in known_other:
            errors.append("%s is no variable %s reads (SHARDPS_<FLAG> or "
                          "one of %s)" % (name, program,
                                          ", ".join(sorted(known_other))))
    return out, errors


def run_with_helpxml(argv, env):
    """Starts the program of `argv` with `argv` and `env` plus --helpxml:
    ([errors], {flag: current value}). Its own parser checks every flag
    and variable (an unknown flag or a bad value: exit 2 and one line; a
    SHARDPS_ variable naming no flag: a warning), then prints the flags
    with the values they got and exits 1."""
    i = 0
    while argv[i] in WRAPPERS:
        i += 1
    program = os.path.basename(argv[i])
    cmd = [binary_path(program)] + list(argv[i + 1:]) + ["--helpxml"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=testlib.clean_env(**env), universal_newlines=True,
                       timeout=30)
    errors = []
    if r.returncode != 1 or "<AllFlags>" not in r.stdout:
        errors.append("%s with %s: exit %d: %s" %
                      (program, " ".join(argv[i + 1:]), r.returncode,
                       r.stderr.strip()))
        return errors, {}
    for line in r.stderr.splitlines():
        if "names no flag" in line or "warning" in line.lower():
            errors.append("%s: %s" % (program, line))
    current = {f.findtext("name"): f.findtext("current")
               for f in ET.fromstring(r.stdout).iter("flag")}
    return errors, current


def check_container_flags(container, known_other):
    """[errors] of a container's flags, variables and exec probes."""
    errors = []
    argv = list(container.get("command", [])) + list(container.get("args", []))
    program, cmd_flags, errs = split_command(argv)
    errors += errs
    if program is None:
        return errors
    env_list = container.get("env", [])
    env_set, errs = env_flags(program, env_list, known_other)
    errors += errs
    env = {e["name"]: e["value"] for e in env_list if "value" in e}
    errs, current = run_with_helpxml(argv, env)
    errors += errs
    wanted = dict(env_set)
    wanted.update(dict(cmd_flags))  # the command line wins
    flags = binary_flags(program)
    for flag, value in wanted.items():
        got = current.get(flag)
        if got is None or (flags[flag] == "string" and got != value):
            errors.append("%s: --%s is %r after parsing, not %r" %
                          (program, flag, got, value))
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(kind) or {}
        if "exec" not in probe:
            continue
        pargv = probe["exec"]["command"]
        pprogram, _, errs = split_command(pargv)
        errors += ["%s: %s" % (kind, e) for e in errs]
        if pprogram is None:
            continue
        # An exec probe runs with the container's environment.
        _, errs = env_flags(pprogram, env_list, known_other)
        errors += ["%s: %s" % (kind, e) for e in errs]
        errs, _ = run_with_helpxml(pargv, env)
        errors += ["%s: %s" % (kind, e) for e in errs]
    return errors


def effective_flags(container):
    """{flag: value} of a container: its variables, then its command line."""
    argv = list(container.get("command", [])) + list(container.get("args", []))
    _, cmd_flags, _ = split_command(argv)
    out = {}
    for e in container.get("env", []):
        if e.get("name", "").startswith("SHARDPS_") and "value" in e:
            out[e["name"][len("SHARDPS_"):].lower()] = e["value"]
    out.update(dict(cmd_flags))
    return out


def memory_mib(quantity):
    units = {"Ki": 1 / 1024.0, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024,
             "k": 1e3 / 2**20, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    m = re.match(r"^(\d+(?:\.\d+)?)([A-Za-z]*)$", str(quantity))
    if not m or (m.group(2) and m.group(2) not in units):
        raise ValueError("memory quantity %r" % quantity)
    return float(m.group(1)) * (units[m.group(2)] if m.group(2) else 2**-20)


def pod_containers(workload):
    """The containers of a workload's pod template, init (sidecar)
    containers first."""
    spec = workload.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("initContainers", []) + spec.get("containers", [])


def kustomized_files(path, kustomizations):
    """The object files a kustomization (its path) lists, with those of
    the kustomization folders it lists, recursively."""
    folder = os.path.dirname(path)
    out = set()
    for r in kustomizations[path].get("resources", []):
        p = os.path.normpath(os.path.join(folder, r))
        k = os.path.join(p, "kustomization.yaml")
        if os.path.isdir(p):
            if k not in kustomizations:
                raise AssertionError("%s lists %s, which has no "
                                     "kustomization.yaml" % (path, r))
            out |= kustomized_files(k, kustomizations)
        else:
            out.add(p)
    return out


class K8sManifestTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        why = venv_missing()
        if why:
            raise unittest.SkipTest(
                "%s; make it with: bash scripts/setup/python_venv.sh k8s" %
                why)
        cls.files = sorted(glob.glob(os.path.join(K8S_DIR, "**", "*.yaml"),
                                     recursive=True) +
                           glob.glob(os.path.join(K8S_DIR, "**", "*.yml"),
                                     recursive=True))
        cls.docs = run_venv(_LOAD, cls.files)
        cls.objects = []       # (file, object) of the base layout
        cls.beside = []        # (file, object) of beside/
        cls.kustomizations = {}
        cls.components = {}
        cls.patches = {}
        for path in cls.files:
            for doc in cls.docs[path]:
                kind = doc.get("kind") if isinstance(doc, dict) else None
                if kind == "Kustomization":
                    cls.kustomizations[path] = doc
                elif kind == "Component":
                    cls.components[path] = doc
                elif isinstance(doc, list):
                    cls.patches[path] = doc
                elif path.startswith(BESIDE_DIR + os.sep):
                    cls.beside.append((path, doc))
                else:
                    cls.objects.append((path, doc))
        cls.known_other = scheduler_variables()

    # Lookups.

    def one(self, kind, objects=None):
        found = [o for _, o in (objects or self.objects) if o["kind"] == kind]
        self.assertEqual(len(found), 1, "one %s in configs/k8s" % kind)
        return found[0]

    def container(self, workload, name):
        cs = [c for c in pod_containers(workload) if c["name"] == name]
        self.assertEqual(len(cs), 1, "one container %s" % name)
        return cs[0]

    def plaintext_objects(self):
        """The StatefulSet and Job with the plaintext/ component applied."""
        self.assertEqual(len(self.components), 1, "one kustomize Component")
        path, comp = next(iter(self.components.items()))
        folder = os.path.dirname(path)
        out = []
        for patch in comp["patches"]:
            target = patch["target"]
            base = [o for _, o in self.objects
                    if o["kind"] == target["kind"] and
                    o["metadata"]["name"] == target["name"]]
            self.assertEqual(len(base), 1, "the target of %s" % patch)
            api = base[0]["apiVersion"]
            self.assertEqual(api, "%s/%s" % (target["group"],
                                             target["version"]))
            ops = self.patches[os.path.join(folder, patch["path"])]
            try:
                obj = apply_json_patch(json.loads(json.dumps(base[0])), ops)
            except ValueError as e:
                self.fail("%s does not apply to %s (kustomize build would "
                          "fail the same way): %s" %
                          (os.path.relpath(os.path.join(folder,
                                                        patch["path"]),
                                           testlib.REPO), target["name"], e))
            out.append((path, obj))
        return out

    # Tests.

    def test_every_file_is_checked(self):
        """Every YAML file is Kubernetes objects, a kustomization, a
        component, or a JSON patch a component uses; the kustomization
        lists every object file but the Secret template."""
        used = set()
        for path, comp in self.components.items():
            for patch in comp["patches"]:
                p = os.path.join(os.path.dirname(path), patch["path"])
                self.assertIn(p, self.patches, "%s: %s" % (path, p))
                used.add(p)
        self.assertEqual(set(self.patches), used,
                         "JSON patches no component uses")
        base = os.path.join(K8S_DIR, "kustomization.yaml")
        beside = os.path.join(BESIDE_DIR, "kustomization.yaml")
        self.assertIn(base, self.kustomizations)
        self.assertIn(beside, self.kustomizations)
        templates = {p for p, o in self.objects if o["kind"] == "Secret"}
        self.assertEqual({os.path.relpath(p, K8S_DIR) for p in templates},
                         {"secret-template.yaml"})
        model = {p for p, o in self.objects if o["kind"] == "ConfigMap"}
        self.assertEqual(kustomized_files(base, self.kustomizations),
                         {p for p, _ in self.objects} - templates,
                         "kustomization.yaml resources: every object file "
                         "but the Secret template (applying it would "
                         "replace the real Secret) and beside/'s")
        self.assertEqual(kustomized_files(beside, self.kustomizations),
                         {p for p, _ in self.beside} | model,
                         "beside/kustomization.yaml resources: its own "
                         "files and the model")
        for comp in self.components:
            self.assertTrue(os.path.isfile(comp))
        for kpath, objects in ((base, self.objects), (beside, self.beside)):
            names = {i["name"]
                     for i in self.kustomizations[kpath].get("images", [])}
            for _, o in objects:
                for c in pod_containers(o):
                    self.assertIn(c["image"], names,
                                  "%s: %s's images maps %s" %
                                  (c["name"], kpath, sorted(names)))
        self.assertTrue(os.path.isfile(os.path.join(K8S_DIR, "Dockerfile")))

    def test_schemas(self):
        """Every object, and the plaintext variants, against the schemas
        of Kubernetes 1.31 and 1.37, strictly."""
        objs = self.objects + self.plaintext_objects() + self.beside
        self.assertGreaterEqual(len(objs), 10)
        results = run_venv(_VALIDATE, stdin=json.dumps(
            {"objects": [o for _, o in objs],
             "versions": list(KUBERNETES_VERSIONS)}))
        failures = ["%s %s/%s: %s" % (os.path.relpath(p, testlib.REPO),
                                      o["kind"], o["metadata"]["name"], e)
                    for (p, o), errs in zip(objs, results) for e in errs]
        self.assertEqual(failures, [], "\n".join(failures))

    def test_flags_are_the_binaries(self):
        """Every flag and variable of every container and exec probe, in
        the base and the plaintext variant, is one its program takes."""
        failures = []
        for path, o in self.objects + self.plaintext_objects() + self.beside:
            for c in pod_containers(o):
                failures += ["%s %s: %s" % (os.path.basename(path), c["name"],
                                            e)
                             for e in check_container_flags(c,
                                                            self.known_other)]
        self.assertEqual(failures, [], "\n".join(failures))

    def test_sweep_trial_job(self):
        """A trial Job of scripts/sweep/sweep.py --launcher=k8s, made from the
        trainer Job here, passes the schemas and the flag check."""
        sys.path.insert(0, os.path.join(testlib.REPO, "scripts", "sweep"))
        import sweep_k8s
        job = sweep_k8s.render_job(
            self.one("Job"), sweep_k8s.job_name("lr-sweep", 3, 1),
            "lr-sweep", "lr-sweep-t3a1", 4,
            ["--progress=off", "--log_every_steps=10", "--batch_size=32",
             "--config_set=optimizer.learning_rate=0.1"],
            pservers="ps-0.ps:7164,ps-1.ps:7164")
        results = run_venv(_VALIDATE, stdin=json.dumps(
            {"objects": [job], "versions": list(KUBERNETES_VERSIONS)}))
        self.assertEqual(results, [[]])
        c = self.container(job, "trainer")
        self.assertEqual(check_container_flags(c, self.known_other), [])
        self.assertEqual(job["metadata"]["name"], "shardps-lr-sweep-t3a1")
        self.assertEqual(job["spec"]["completions"], 4)
        self.assertEqual([a for a in c["args"] if "--pservers" in a],
                         ["--pservers=ps-0.ps:7164,ps-1.ps:7164"])

    def test_flag_check_catches_made_up_flags(self):
        """The check above is not vacuous: a made-up flag, a made-up
        SHARDPS_ variable, a misspelt scheduler variable and a bad value
        are each caught."""
        job = self.one("Job")
        base = self.container(job, "trainer")
        self.assertEqual(check_container_flags(base, self.known_other), [])
        cases = [
            ("args", "--num_gradient_servrs=2", "num_gradient_servrs"),
            ("args", "--max_steps=ten", "max_steps"),
            ("env", {"name": "SHARDPS_NUM_GRADIENT_SERVRS", "value": "2"},
             "SHARDPS_NUM_GRADIENT_SERVRS"),
            ("env", {"name": "JOB_COMPLETION_IDX", "value": "0"},
             "JOB_COMPLETION_IDX"),
            ("env", {"name": "SHARDPS_MAX_STEPS", "value": "ten"},
             "SHARDPS_MAX_STEPS"),
        ]
        for where, extra, named in cases:
            c = json.loads(json.dumps(base))
            c.setdefault(where, []).append(extra)
            errors = check_container_flags(c, self.known_other)
            self.assertTrue([e for e in errors if named in e],
                            "%s not caught: %s" % (extra, errors))
        # The binary itself refuses them too (not only the static list).
        argv = base["command"] + base["args"] + ["--no_such_flag_k8s=1"]
        errs, _ = run_with_helpxml(argv, {})
        self.assertTrue(errs and "no_such_flag_k8s" in errs[0], errs)
        errs, _ = run_with_helpxml(base["command"] + base["args"],
                                   {"SHARDPS_NO_SUCH_FLAG_K8S": "1"})
        self.assertTrue([e for e in errs if "SHARDPS_NO_SUCH_FLAG_K8S" in e],
                        errs)

    def check_pods_selected_alike(self, svc, sts, pdb):
        """The headless Service and the PDB select the StatefulSet's pods,
        which it names after the Service and starts in parallel."""
        labels = sts["spec"]["template"]["metadata"]["labels"]
        self.assertEqual(svc["spec"].get("clusterIP"), "None", "headless")
        self.assertEqual(svc["spec"]["selector"],
                         sts["spec"]["selector"]["matchLabels"])
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"],
                         sts["spec"]["selector"]["matchLabels"])
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v, "pod label %s" % k)
        self.assertEqual(sts["spec"]["serviceName"], svc["metadata"]["name"])
        self.assertEqual(sts["spec"]["podManagementPolicy"], "Parallel")

    def check_trainers_reach_every_pserver(self, svc, sts, ps, psf, trf):
        """The pserver container, the Service and the trainers' --pservers
        (every pod of the StatefulSet, in order) name the same port."""
        port = int(psf.get("port", 7164))
        cports = {p["name"]: p["containerPort"] for p in ps["ports"]}
        sports = {p["name"]: p for p in svc["spec"]["ports"]}
        self.assertEqual(cports["grpc"], port)
        self.assertEqual(sports["grpc"]["port"], port)
        self.assertIn(sports["grpc"].get("targetPort"), ("grpc", port))
        replicas = sts["spec"]["replicas"]
        want = ["%s-%d.%s:%d" % (sts["metadata"]["name"], i,
                                 svc["metadata"]["name"], port)
                for i in range(replicas)]
        self.assertEqual(trf["pservers"].split(","), want)

    def check_trainer_count(self, job, psf, trf):
        """The indexed Job's completions are the trainer count both sides
        use; its failures end it as the trainers' exit statuses say."""
        spec = job["spec"]
        self.assertEqual(spec["completionMode"], "Indexed")
        n = spec["completions"]
        self.assertEqual(spec["parallelism"], n)
        self.assertEqual(int(trf["num_gradient_servers"]), n,
                         "SHARDPS_NUM_GRADIENT_SERVERS (an indexed Job "
                         "gives no count)")
        # 0: the pservers take the count each job's chief sends.
        self.assertIn(int(psf.get("num_gradient_servers", 0)), (0, n),
                      "the pservers' --num_gradient_servers")
        self.assertNotIn("trainer_id", trf, "JOB_COMPLETION_INDEX gives it")
        self.assertEqual(spec["template"]["spec"]["restartPolicy"], "Never",
                         "podFailurePolicy needs it")
        self.assertTrue(1 <= spec["backoffLimit"] <= 4 * n)
        rules = spec.get("podFailurePolicy", {}).get("rules", [])
        self.assertTrue([r for r in rules if r["action"] == "FailJob" and
                         2 in r["onExitCodes"]["values"]],
                        "exit status 2 (bad flags or config) fails the Job")

    def check_checkpoints_on_claims(self, sts, ps, psf, trf):
        """Checkpoints on the volume claim template, the chief asking."""
        self.assertIn("checkpoint_dir", psf)
        claims = {t["metadata"]["name"]
                  for t in sts["spec"]["volumeClaimTemplates"]}
        mounts = [m for m in ps["volumeMounts"] if m["name"] in claims]
        self.assertTrue([m for m in mounts
                         if psf["checkpoint_dir"].startswith(
                             m["mountPath"].rstrip("/") + "/")
                         or psf["checkpoint_dir"] == m["mountPath"]],
                        "--checkpoint_dir on a volumeClaimTemplate")
        self.assertGreater(int(trf.get("checkpoint_every_steps", 0)), 0)

    def test_pservers_and_trainers_agree(self):
        """Service, StatefulSet, PDB and Job name the same pods, ports and
        counts."""
        svc, sts = self.one("Service"), self.one("StatefulSet")
        pdb, job = self.one("PodDisruptionBudget"), self.one("Job")
        ps = self.container(sts, "pserver")
        tr = self.container(job, "trainer")
        psf, trf = effective_flags(ps), effective_flags(tr)
        self.check_pods_selected_alike(svc, sts, pdb)
        self.check_trainers_reach_every_pserver(svc, sts, ps, psf, trf)
        self.check_trainer_count(job, psf, trf)
        self.assertRegex(trf.get("job_id", "default"), JOB_ID)
        self.check_checkpoints_on_claims(sts, ps, psf, trf)

    def test_model_config_is_the_repository_one(self):
        """The ConfigMap holds configs/fmnist_mlp.pbtxt as it is, and the
        trainers' --config is that key where the ConfigMap is mounted."""
        cm = self.one("ConfigMap")
        with open(MODEL_CONFIG) as f:
            text = f.read()
        key = os.path.basename(MODEL_CONFIG)
        self.assertEqual(cm["data"].get(key), text,
                         "configs/k8s/model-configmap.yaml's %s differs from "
                         "configs/fmnist_mlp.pbtxt: copy the file's text "
                         "into it (indented 4 spaces)" % key)
        job = self.one("Job")
        tr = self.container(job, "trainer")
        vols = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
        mounts = [m for m in tr["volumeMounts"]
                  if vols[m["name"]].get("configMap", {}).get("name") ==
                  cm["metadata"]["name"]]
        self.assertEqual(len(mounts), 1)
        self.assertEqual(effective_flags(tr)["config"],
                         mounts[0]["mountPath"].rstrip("/") + "/" + key)

    def test_files_are_mounted(self):
        """Every file flag (token, certificates, config, checkpoints) of
        every container and exec probe lies in a mounted volume; a Secret's
        file is one of its items, and every key a pod takes from the Secret
        is in the template."""
        secret = self.one("Secret")
        keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
        self.assertEqual(keys, {"token", "ca.pem", "server.pem", "server.key",
                                "client.pem", "client.key"})
        self.assertIn(" ", secret["stringData"]["token"],
                      "the placeholder token must be one no pserver takes")
        for path, o in self.objects + self.plaintext_objects() + self.beside:
            if "template" not in o.get("spec", {}):
                continue
            pod = o["spec"]["template"]["spec"]
            vols = {v["name"]: v for v in pod.get("volumes", [])}
            for t in o["spec"].get("volumeClaimTemplates", []):
                vols[t["metadata"]["name"]] = {"claim": True}
            for c in pod_containers(o):
                where = "%s %s" % (os.path.basename(path), c["name"])
                files = {}
                for m in c.get("volumeMounts", []):
                    v = vols.get(m["name"])
                    self.assertIsNotNone(v, "%s: volume %s" % (where,
                                                              m["name"]))
                    s = v.get("secret")
                    if s:
                        self.assertEqual(s["secretName"],
                                         secret["metadata"]["name"])
                        items = s.get("items") or [{"key": k, "path": k}
                                                   for k in keys]
                        for it in items:
                            self.assertIn(it["key"], keys, where)
                            files[m["mountPath"] + "/" + it["path"]] = "secret"
                    else:
                        files[m["mountPath"]] = "dir"
                flagsets = [effective_flags(c)]
                for kind in ("startupProbe", "readinessProbe",
                             "livenessProbe"):
                    probe = c.get(kind) or {}
                    if "exec" in probe:
                        _, pf, _ = split_command(probe["exec"]["command"])
                        # The container's variables, then the command.
                        f = effective_flags({"env": c.get("env", [])})
                        f.update(dict(pf))
                        flagsets.append(f)
                for flags in flagsets:
                    for flag in PATH_FLAGS:
                        p = flags.get(flag)
                        if not p:
                            continue
                        ok = files.get(p) == "secret" or any(
                            kind == "dir" and p.startswith(d.rstrip("/") + "/")
                            for d, kind in files.items())
                        self.assertTrue(ok, "%s: --%s=%s is in no mounted "
                                        "volume or Secret item (%s)" %
                                        (where, flag, p, sorted(files)))

    def test_probes_suit_tls(self):
        """With TLS a pserver answers no plaintext gRPC, so its probes are
        not Kubernetes' native gRPC probes; without TLS they are. Probes
        name the gRPC port, and ps_status dials the pserver's own port. A
        trainer's readiness probe is its health service or its metrics."""
        for variant in (self.objects, self.plaintext_objects()):
            sts = self.one("StatefulSet", variant)
            ps = self.container(sts, "pserver")
            f = effective_flags(ps)
            port = int(f.get("port", 7164))
            tls = bool(f.get("tls_cert_file"))
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = ps.get(kind)
                self.assertIsNotNone(probe, kind)
                if tls:
                    self.assertNotIn("grpc", probe,
                                     "%s: a native gRPC probe speaks no "
                                     "TLS" % kind)
                else:
                    self.assertEqual(probe.get("grpc"), {"port": port}, kind)
                if "tcpSocket" in probe:
                    self.assertIn(probe["tcpSocket"]["port"], ("grpc", port))
                if "exec" in probe:
                    _, pf, _ = split_command(probe["exec"]["command"])
                    pf = dict(pf)
                    self.assertEqual(pf["pservers"], "127.0.0.1:%d" % port)
                    self.assertEqual(pf.get("health"), "true",
                                     "%s: ps_status --health (SERVING once "
                                     "the checkpoints are loaded)" % kind)
                    self.assertEqual(pf.get("tls_server_name"), "localhost",
                                     "the name secret-template.yaml puts "
                                     "in the certificate")
                    self.assertLess(int(pf.get("timeout_s", 5)),
                                    probe.get("timeoutSeconds", 1))
            job = self.one("Job", variant)
            tr = self.container(job, "trainer")
            tf = effective_flags(tr)
            self.assertEqual(bool(tf.get("tls_ca_file")), tls,
                             "trainers and pservers agree on TLS")
            # A trainer's health service (--health_port) is plaintext
            # whatever its TLS to the pservers.
            self.assertNotIn("livenessProbe", tr)
            probe = tr.get("readinessProbe", {})
            cports = {p["name"]: p["containerPort"] for p in tr["ports"]}
            if "grpc" in probe:
                port = int(tf.get("health_port", -1))
                self.assertGreater(port, 0, "--health_port serves the probe")
                self.assertEqual(probe["grpc"]["port"], port)
                self.assertEqual(cports.get("health"), port)
            elif "httpGet" in probe:
                self.assertIn(probe["httpGet"]["port"],
                              ("metrics", int(tf["monitoring_port"])))

    def test_prometheus_annotations(self):
        """Pods carry prometheus.io/scrape, port and path, and the port is
        their --monitoring_port and their container port "metrics"."""
        for kind, name in (("StatefulSet", "pserver"), ("Job", "trainer")):
            w = self.one(kind)
            c = self.container(w, name)
            port = int(effective_flags(c)["monitoring_port"])
            self.assertGreater(port, 0)
            ann = w["spec"]["template"]["metadata"]["annotations"]
            self.assertEqual(ann.get("prometheus.io/scrape"), "true")
            self.assertEqual(ann.get("prometheus.io/port"), str(port))
            self.assertEqual(ann.get("prometheus.io/path"), "/metrics")
            cports = {p["name"]: p["containerPort"] for p in c["ports"]}
            self.assertEqual(cports.get("metrics"), port)

    def test_resources(self):
        """Requests and limits everywhere; a pserver's --max_memory_mb, its
        checkpoint copy and gRPC's buffers fit its memory limit."""
        for kind in ("StatefulSet", "Job"):
            for c in self.one(kind)["spec"]["template"]["spec"]["containers"]:
                r = c.get("resources", {})
                for part in ("requests", "limits"):
                    for res in ("cpu", "memory"):
                        self.assertIn(res, r.get(part, {}),
                                      "%s %s.%s" % (c["name"], part, res))
        ps = self.container(self.one("StatefulSet"), "pserver")
        limit = memory_mib(ps["resources"]["limits"]["memory"])
        mb = int(effective_flags(ps).get("max_memory_mb", 0))
        self.assertGreater(mb, 0, "--max_memory_mb set (0 takes 3/4 of the "
                           "limit, too much for a checkpoint's copy)")
        self.assertLessEqual(2 * mb + PSERVER_OVERHEAD_MIB, limit,
                             "2 x --max_memory_mb (tables and a checkpoint's "
                             "copy) + %d MiB must fit the memory limit" %
                             PSERVER_OVERHEAD_MIB)

    def beside_parts(self):
        """beside/'s Service, Job, claim, pod spec, and its pserver and
        trainer containers with their effective flags."""
        objs = self.beside
        job = self.one("Job", objs)
        ps, tr = self.container(job, "pserver"), self.container(job, "trainer")
        return (self.one("Service", objs), job,
                self.one("PersistentVolumeClaim", objs),
                job["spec"]["template"]["spec"], ps, tr, effective_flags(ps),
                effective_flags(tr))

    def test_beside_pods(self):
        """beside/: pod k runs trainer k and, as a native sidecar, pserver
        k, named through the headless Service; the trainer sees the
        pserver's shared memory and waits for the others before its pod
        (and so its pserver) stops."""
        svc, job, _, pod, ps, tr, psf, trf = self.beside_parts()
        self.assertEqual([c["name"] for c in pod["initContainers"]],
                         ["pserver"])
        self.assertEqual(ps.get("restartPolicy"), "Always",
                         "a native sidecar: stopped after the trainer")
        self.assertNotIn("readinessProbe", ps,
                         "a sidecar's readiness would hold the pod back "
                         "as the trainer's does; startup gates the trainer")
        self.assertIn("startupProbe", ps)
        self.assertTrue(pod.get("shareProcessNamespace"),
                        "the trainer opens the pserver's region in /proc")
        users = {c.get("securityContext", {}).get(
            "runAsUser", pod["securityContext"]["runAsUser"])
            for c in (ps, tr)}
        self.assertEqual(len(users), 1, "one user: /proc/<pid>/fd opens")
        self.assertGreater(int(trf.get("wait_for_trainers_s", 0)), 0)
        self.assertEqual(pod["restartPolicy"], "OnFailure",
                         "a failed trainer restarts beside its pserver")
        self.assertEqual(trf.get("mode"), "sync")
        # Names: pod k is <job>-k.<subdomain>, the Service headless, not
        # waiting for readiness, selecting exactly these pods.
        self.assertEqual(pod["subdomain"], svc["metadata"]["name"])
        self.assertEqual(svc["spec"].get("clusterIP"), "None")
        self.assertTrue(svc["spec"].get("publishNotReadyAddresses"),
                        "a pod is ready only once every pserver serves")
        selector = svc["spec"]["selector"].items()
        labels = job["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(all(labels.get(k) == v for k, v in selector))
        for _, o in self.objects:
            if o["kind"] in ("StatefulSet", "Job"):
                other = o["spec"]["template"]["metadata"]["labels"]
                self.assertFalse(all(other.get(k) == v for k, v in selector),
                                 "the Service selects the base's pods")
        port = int(psf.get("port", 7164))
        self.assertEqual({p["name"]: p["containerPort"]
                          for p in ps["ports"]}["grpc"], port)
        want = ["%s-%d.%s:%d" % (job["metadata"]["name"], i,
                                 svc["metadata"]["name"], port)
                for i in range(job["spec"]["completions"])]
        self.assertEqual(trf["pservers"].split(","), want)

    def test_beside_counts_volumes_and_resources(self):
        """beside/: the trainer count agrees everywhere, the checkpoints
        are a folder per index on a volume any node mounts, the model is
        the ConfigMap's, TLS on both sides, ports apart, resources fit."""
        _, job, pvc, pod, ps, tr, psf, trf = self.beside_parts()
        spec = job["spec"]
        self.assertEqual(spec["completionMode"], "Indexed")
        n = spec["completions"]
        self.assertEqual(spec["parallelism"], n)
        self.assertEqual(int(trf["num_gradient_servers"]), n)
        self.assertIn(int(psf.get("num_gradient_servers", 0)), (0, n))
        self.assertNotIn("trainer_id", trf, "JOB_COMPLETION_INDEX gives it")
        self.assertGreater(int(trf.get("checkpoint_every_steps", 0)), 0)
        self.assertIn("$(JOB_COMPLETION_INDEX)", psf["checkpoint_dir"])
        vols = {v["name"]: v for v in pod["volumes"]}
        mount = [m for m in ps["volumeMounts"]
                 if psf["checkpoint_dir"].startswith(m["mountPath"] + "/")]
        self.assertEqual(len(mount), 1)
        claim = vols[mount[0]["name"]].get("persistentVolumeClaim", {})
        self.assertEqual(claim.get("claimName"), pvc["metadata"]["name"])
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteMany"])
        cm = self.one("ConfigMap")
        mounts = [m for m in tr["volumeMounts"]
                  if vols[m["name"]].get("configMap", {}).get("name") ==
                  cm["metadata"]["name"]]
        self.assertEqual(len(mounts), 1)
        self.assertEqual(trf["config"], mounts[0]["mountPath"] +
                         "/" + os.path.basename(MODEL_CONFIG))
        self.assertEqual(bool(psf.get("tls_cert_file")),
                         bool(trf.get("tls_ca_file")))
        ports = [p["containerPort"] for c in (ps, tr) for p in c["ports"]]
        self.assertEqual(len(ports), len(set(ports)), "one pod, one port set")
        self.assertNotEqual(psf["monitoring_port"], trf["monitoring_port"])
        ann = spec["template"]["metadata"]["annotations"]
        self.assertEqual(ann["prometheus.io/port"], psf["monitoring_port"])
        for c in (ps, tr):
            for part in ("requests", "limits"):
                for res in ("cpu", "memory"):
                    self.assertIn(res, c.get("resources", {}).get(part, {}))
        limit = memory_mib(ps["resources"]["limits"]["memory"])
        self.assertLessEqual(2 * int(psf["max_memory_mb"]) +
                             PSERVER_OVERHEAD_MIB, limit)

    def test_json_patch(self):
        """The RFC 6902 subset applied above, on a small document."""
        doc = {"a": [{"n": "x"}, {"n": "y"}], "b": {"c": 1}}
        apply_json_patch(doc, [
            {"op": "test", "path": "/a/1/n", "value": "y"},
            {"op": "remove", "path": "/a/0"},
            {"op": "replace", "path": "/b/c", "value": 2},
            {"op": "add", "path": "/a/-", "value": {"n": "z"}},
            {"op": "add", "path": "/b/d~1e", "value": 3}])
        self.assertEqual(doc, {"a": [{"n": "y"}, {"n": "z"}],
                               "b": {"c": 2, "d/e": 3}})
        with self.assertRaises(ValueError):
            apply_json_patch(doc, [{"op": "test", "path": "/a/0/n",
                                    "value": "x"}])
        with self.assertRaises(ValueError):
            apply_json_patch(doc, [{"op": "remove", "path": "/a/5"}])


if __name__ == "__main__":
    testlib.main()
