#!/usr/bin/env python3
"""Checks of the code's shape (docs/architecture.md, "Rules"), as a test.

- Parts are folders, and dependencies point one way: a folder's non-test
  sources include only the folders that docs/architecture.md's "Layers"
  table allows it, and no source, tests included, includes a folder that
  its "never includes" table forbids (the store no transport, the pserver
  nothing of the trainer). The rules are read from that page.
- Sizes by design, not by file: no class over 700 lines, counted over its
  declaration and every member function it defines in any file; no function
  (C++ or Python, tests included) over 60 lines; no folder over 30 files.
- Files are named for what they hold: a member function of class C is
  defined in a file whose header (the file's own, or the header its name
  extends: request_handler_lars.cc -> request_handler.h) declares C.
- Transports are decorators: ParamClient's and RequestHandler's sources
  name no shared region or call slot (TRANSPORT_BLIND).
- gRPC headers (grpcpp/, grpc/, *.grpc.pb.h) are included only by files
  whose names say they are a gRPC binding, server or client.
- The core libraries link without gRPC: their test programs do not load
  libgrpc (and the gRPC binding's test does, so the check can fail).

Every check runs on a planted violation too (PlantedViolationTest), so none
of them can pass by seeing nothing.

Standard library only:  python3 tests/structure_test.py --bin_dir build
"""

import argparse
import ast
import collections
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_CLASS_LINES = 700
MAX_FUNCTION_LINES = 60
MAX_FOLDER_FILES = 30
BIN_DIR = None

SOURCE_DIRS = ["base", "common", "compression", "kernels", "optimizer", "proto",
               "pserver",
               "trainer", "tools", "benchmarks", "scripts", "tests", "python",
               "examples"]
CPP_EXT = (".h", ".cc", ".cu")

# The layer rules live in docs/architecture.md ("Layers"): two tables, read
# here (read_layers), so that the page and the check cannot disagree.
ARCHITECTURE = "docs/architecture.md"


def markdown_table(text, header):
    """The rows of the markdown table whose header row's first cells are
    `header`, as lists of cells; [] when there is none."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|"):
            if inside:
                break
            continue
        if not inside:
            inside = [c.lower() for c in cells[:len(header)]] == header
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue  # the separator row
        rows.append(cells)
    return rows


def backticked(cell):
    return re.findall(r"`([^`]+)`", cell)


def read_layers(root=None):
    """({folder: [folders it may include]}, {folder: [folders it never
    includes]}) from the two tables of docs/architecture.md's "Layers"."""
    text = read(os.path.join(root or ROOT, ARCHITECTURE))
    allowed, forbidden = {}, {}
    for cells in markdown_table(text, ["folder", "may include"]):
        names = backticked(cells[0])
        if len(names) == 1:
            allowed[names[0]] = backticked(cells[1])
    for cells in markdown_table(text, ["folder", "never includes"]):
        names = backticked(cells[0])
        if len(names) == 1:
            forbidden[names[0]] = backticked(cells[1])
    return allowed, forbidden


# What issue 31 has yet to take apart: each entry must still be over its
# limit (the test fails when one is fixed and left here), and nothing else
# may be. The list only shrinks.
KNOWN_LONG_FUNCTIONS = {}
KNOWN_LARGE_CLASSES = {}
KNOWN_MISPLACED = []


def rel(path, root=None):
    return os.path.relpath(path, root or ROOT)


def is_test(path, root=None):
    r = rel(path, root)
    return (r.startswith("tests/") or "/testing/" in r or
            re.search(r"_test\.(cc|py)$", r) is not None)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def walk(top):
    """os.walk's (folder, files) under `top`, less build output that lands
    in a source folder (`pip install ./python` writes python/build/ and
    python/shardps.egg-info/; .gitignore keeps them out of git)."""
    for dirpath, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith("build") and
                   not d.endswith(".egg-info") and d != "__pycache__"]
        yield dirpath, files


def source_files(exts, root=None):
    root = root or ROOT
    for d in SOURCE_DIRS:
        for dirpath, files in walk(os.path.join(root, d)):
            for f in sorted(files):
                if f.endswith(exts):
                    yield os.path.join(dirpath, f)


def strip_cpp(code):
    """Comments, string and char literals blanked out, newlines kept."""
    out = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", code[i:j]))
            i = j
        elif code.startswith('R"', i) and (i == 0 or not code[i - 1].isalnum()):
            m = re.match(r'R"([^(]*)\(', code[i:])
            end = code.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append(re.sub(r"[^\n]", " ", code[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and code[j] != c:
                j += 2 if code[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", code[i:j + 1]))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parameter_list_start(head):
    """The index of the "(" that opens the last parenthesised group of
    `head` (a function's parameters, whatever parentheses they hold, as in
    std::function<void(int)>); the last "(" when they do not balance (a
    constructor's initialisers cut by a brace); -1 without one."""
    close = head.rfind(")")
    depth = 0
    for i in range(close, -1, -1):
        if head[i] == ")":
            depth += 1
        elif head[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    return head.rfind("(")


CONTROL = {"if", "for", "while", "switch", "catch", "return", "else", "do"}
FUNCTION_HEAD = re.compile(
    r"\)\s*(const)?\s*(noexcept)?\s*(override|final)?\s*"
    r"(ABSL_[A-Z_]+\([^()]*\)\s*)*(->\s*[\w:<>,\s\*&]+)?\s*$")


@functools.lru_cache(maxsize=None)
def cpp_functions(path):
    """(first line, last line, name) of each outermost function body."""
    code = strip_cpp(read(path))
    found = []
    stack = []  # True for a function body (outermost only)
    last_stop = 0  # index after the last ';', '{' or '}'
    depth_in_function = 0
    for i, c in enumerate(code):
        if c == "{":
            head = code[last_stop:i]
            is_function = False
            if depth_in_function == 0:
                paren = parameter_list_start(head)
                name = re.findall(r"([~\w:]+)\s*$", head[:paren]) if paren >= 0 else []
                is_function = (FUNCTION_HEAD.search(head) is not None and
                               bool(name) and name[0] not in CONTROL and
                               not re.search(r"\]\s*$", head[:paren]))
            if is_function:
                start = code.count("\n", 0, last_stop + len(head) - len(head.lstrip()))
                stack.append((True, start + 1, name[0]))
                depth_in_function += 1
            else:
                stack.append((False, 0, ""))
                if depth_in_function:
                    depth_in_function += 1
            last_stop = i + 1
        elif c == "}":
            if stack:
                opened, start, name = stack.pop()
                if opened:
                    found.append((start, code.count("\n", 0, i) + 1, name))
                if depth_in_function:
                    depth_in_function -= 1
            last_stop = i + 1
        elif c == ";":
            last_stop = i + 1
    return found


def py_functions(path):
    tree = ast.parse(read(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.lineno, node.end_lineno, node.name


def long_functions(root=None):
    """{"path name": lines} of every function over MAX_FUNCTION_LINES."""
    found = {}
    for path in source_files(CPP_EXT, root):
        for start, end, name in cpp_functions(path):
            if end - start + 1 > MAX_FUNCTION_LINES:
                found[f"{rel(path, root)} {name}"] = end - start + 1
    for path in source_files((".py",), root):
        for start, end, name in py_functions(path):
            if end - start + 1 > MAX_FUNCTION_LINES:
                found[f"{rel(path, root)} {name}"] = end - start + 1
    return found


CLASS_HEAD = re.compile(
    r"\b(?:class|struct)\s+(?:ABSL_\w+(?:\([^()]*\))?\s+)?(\w+)"
    r"(?:\s+final)?\s*(?::[^;{]*)?\{")


def class_declarations(code):
    """(name, lines) of each class or struct body in stripped `code`."""
    for m in CLASS_HEAD.finditer(code):
        depth, i = 0, m.end() - 1
        while i < len(code):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        yield m.group(1), code.count("\n", m.start(), i) + 1


def class_sizes(root=None):
    """{class: lines} over its declarations and the member functions it
    defines outside them, in every non-test file."""
    sizes = collections.Counter()
    for path in source_files(CPP_EXT, root):
        if is_test(path, root):
            continue
        if path.endswith(".h"):
            for name, lines in class_declarations(strip_cpp(read(path))):
                sizes[name] += lines
        for start, end, name in cpp_functions(path):
            parts = name.split("::")
            if len(parts) >= 2 and parts[-2][:1].isupper():
                sizes[parts[-2]] += end - start + 1
    return sizes


def large_classes(root=None):
    return {c: n for c, n in class_sizes(root).items() if n > MAX_CLASS_LINES}


def full_folders(root=None):
    """{folder: files} of every source folder over MAX_FOLDER_FILES."""
    root = root or ROOT
    found = {}
    for d in SOURCE_DIRS:
        for dirpath, files in walk(os.path.join(root, d)):
            if len(files) > MAX_FOLDER_FILES:
                found[rel(dirpath, root)] = len(files)
    return found


def misplaced_definitions(root=None):
    """Member functions defined in a file that is not named for their
    class: "file: Class" for each."""
    found = set()
    for path in source_files((".cc", ".cu"), root):
        if is_test(path, root):
            continue
        folder, base = os.path.split(path)
        parts = base.rsplit(".", 1)[0].split("_")
        homes = [path] + [os.path.join(folder, "_".join(parts[:i]) + ".h")
                          for i in range(len(parts), 0, -1)]
        declared = "".join(read(h) for h in homes if os.path.exists(h))
        for _, _, name in cpp_functions(path):
            names = name.split("::")
            if len(names) < 2 or not names[-2][:1].isupper():
                continue
            pattern = r"\b(class|struct)\s+(ABSL_\w+\s+)?%s\b" % names[-2]
            if not re.search(pattern, declared):
                found.add(f"{rel(path, root)}: {names[-2]}")
    return sorted(found)


def under(path, folder):
    """Whether `path` is `folder` or lies below it."""
    return path == folder or path.startswith(folder + "/")


def layer_violations(root=None):
    allowed_by, forbidden_by = read_layers(root)
    bad = []
    include = re.compile(r'#include\s+"([^"]+)"')
    for path in source_files(CPP_EXT, root):
        r = rel(path, root)
        folder = os.path.dirname(r)
        targets = [t for t in include.findall(read(path))
                   if t.split("/")[0] in SOURCE_DIRS]  # not a library's
        for f, never in forbidden_by.items():
            if under(folder, f):
                bad += [f"{r} includes {t} (never: {f} -> {n})"
                        for t in targets for n in never
                        if under(os.path.dirname(t), n)]
        if is_test(path, root):
            continue
        if folder not in allowed_by:
            if folder.split("/")[0] in ("base", "common", "pserver", "trainer",
                                        "kernels", "compression", "optimizer",
                                        "python"):
                bad.append(f"{r}: its folder has no rule in {ARCHITECTURE}")
            continue
        allowed = set(allowed_by[folder]) | {folder}
        bad += [f"{r} includes {t}" for t in targets
                if os.path.dirname(t) not in allowed]
    return bad


def grpc_outside_grpc_files(root=None):
    bad = []
    pattern = re.compile(r'#include\s+[<"](grpcpp/|grpc/|[^">]*\.grpc\.pb\.h)')
    for path in source_files(CPP_EXT, root):
        if pattern.search(read(path)) and "grpc" not in os.path.basename(path):
            bad.append(rel(path, root))
    return bad


# Transports are decorators (docs/architecture.md, "A push, end to end"):
# the dense paths of the trainer's ParamClient and the pserver's
# RequestHandler never name a shared region or its call slots; the
# trainer's SharedMemoryPsClient and the pserver's SharedRegions (and the
# bindings) do.
TRANSPORT_BLIND = ["trainer/client/param_client.h",
                   "trainer/client/param_client.cc",
                   "pserver/service/request_handler.cc",
                   "pserver/service/request_handler_lars.cc"]
TRANSPORT_NAMES = re.compile(r"\b(SharedRegion|SharedCaller|SharedCallServer)\b")
TRANSPORT_HEADERS = re.compile(
    r'#include\s+"(common/shared_memory/shared_(region|calls)\.h)"')


def transport_in_paths(root=None):
    bad = []
    for r in TRANSPORT_BLIND:
        path = os.path.join(root or ROOT, r)
        if not os.path.exists(path):
            continue
        code = read(path)
        m = TRANSPORT_HEADERS.search(code)
        n = TRANSPORT_NAMES.search(strip_cpp(code))
        if m or n:
            bad.append(f"{r}: {m.group(1) if m else n.group(0)}")
    return bad


def known(found, known_list, what):
    """The message for `found` against a known list: new entries, and
    entries fixed but still listed."""
    new = {k: v for k, v in found.items() if k not in known_list}
    grown = {k: v for k, v in found.items()
             if k in known_list and v > known_list[k]}
    fixed = [k for k in known_list if k not in found]
    msg = []
    if new:
        msg.append(f"{what} over the limit: {new}")
    if grown:
        msg.append(f"known {what} grown past their listed size: {grown}")
    if fixed:
        msg.append(f"listed as known but no longer over the limit (take "
                   f"them off the list): {fixed}")
    return "; ".join(msg)


class StructureTest(unittest.TestCase):

    def test_no_function_over_60_lines(self):
        msg = known(long_functions(), KNOWN_LONG_FUNCTIONS, "functions")
        self.assertEqual(msg, "")

    def test_no_class_over_700_lines(self):
        msg = known(large_classes(), KNOWN_LARGE_CLASSES, "classes")
        self.assertEqual(msg, "")

    def test_no_folder_over_30_files(self):
        self.assertEqual(full_folders(), {})

    def test_files_named_for_what_they_hold(self):
        self.assertEqual(misplaced_definitions(), KNOWN_MISPLACED)

    def test_function_finder_sees_a_known_function(self):
        # The heuristic must find what it checks.
        found = cpp_functions(
            os.path.join(ROOT, "pserver/store/parameter_store.cc"))
        names = [name for _, _, name in found]
        self.assertIn("ParameterStore::ApplyPushLocked", names)
        self.assertGreater(len(found), 20)

    def test_grpc_headers_only_in_grpc_files(self):
        self.assertEqual(grpc_outside_grpc_files(), [],
                         "gRPC headers in files not named grpc")

    def test_transports_stay_below_the_dense_paths(self):
        self.assertEqual(transport_in_paths(), [],
                         "a shared region named in ParamClient or "
                         "RequestHandler")

    def test_dependencies_point_one_way(self):
        self.assertEqual(layer_violations(), [],
                         "includes against the layering")

    def test_core_libraries_link_without_grpc(self):
        if BIN_DIR is None:
            self.skipTest("no --bin_dir")
        core = ["pserver/store/parameter_store_test",
                "pserver/checkpoint/pserver_checkpoint_test",
                "pserver/replication/pserver_replication_test",
                "pserver/service/pserver_service_test",
                "pserver/server/pserver_server_test",
                "trainer/trainer_test", "trainer/core/training_session_test",
                "trainer/client/client_test",
                "trainer/client/sparse_client_test",
                "trainer/sync_equivalence_test"]
        linked = {}
        for b in core + ["pserver/server/pserver_grpc_test"]:
            path = os.path.join(BIN_DIR, b)
            self.assertTrue(os.path.exists(path), path)
            libs = subprocess.run(["ldd", path], capture_output=True,
                                  text=True, check=True).stdout
            linked[b] = "libgrpc" in libs
        self.assertTrue(linked["pserver/server/pserver_grpc_test"],
                        "the check cannot see gRPC: ldd shows none anywhere")
        self.assertEqual([b for b in core if linked[b]], [],
                         "core libraries that link gRPC")


class PlantedViolationTest(unittest.TestCase):
    """Each check on a small tree that breaks its rule once."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="structure_test.")
        self.addCleanup(shutil.rmtree, self.root)
        # The real rules, read from the page as the real check reads them.
        self.write(ARCHITECTURE, read(os.path.join(ROOT, ARCHITECTURE)))

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)

    def test_store_including_the_service(self):
        self.write("pserver/store/table.h",
                   '#include "pserver/service/request_handler.h"\n')
        self.write("pserver/service/handler.h",
                   '#include "pserver/store/table.h"\n')
        self.assertEqual(layer_violations(self.root), [
            "pserver/store/table.h includes pserver/service/request_handler.h"])

    def test_folder_without_a_rule(self):
        self.write("pserver/extra/thing.h", "")
        self.assertEqual(layer_violations(self.root),
                         ["pserver/extra/thing.h: its folder has no rule in "
                          "docs/architecture.md"])

    def test_store_including_the_transport(self):
        self.write("pserver/store/state.cc",
                   '#include "common/transport/wire_limits.h"\n'
                   '#include "common/storage/blob_io.h"\n')
        self.assertEqual(layer_violations(self.root), [
            "pserver/store/state.cc includes common/transport/wire_limits.h "
            "(never: pserver/store -> common/transport)",
            "pserver/store/state.cc includes common/transport/wire_limits.h"])

    def test_pserver_including_the_trainer_in_tests_too(self):
        self.write("pserver/service/binding_test.cc",
                   '#include "trainer/client/param_client.h"\n')
        self.write("pserver/testing/one_table.h",
                   '#include "trainer/client/job_client.h"\n')
        self.write("tests/client_server/binding_test.cc",
                   '#include "trainer/client/param_client.h"\n')
        self.assertEqual(sorted(layer_violations(self.root)), [
            "pserver/service/binding_test.cc includes "
            "trainer/client/param_client.h (never: pserver -> trainer)",
            "pserver/testing/one_table.h includes trainer/client/job_client.h "
            "(never: pserver -> trainer)"])

    def test_rules_come_from_the_page(self):
        self.write("pserver/store/state.cc",
                   '#include "common/transport/wire_limits.h"\n')
        self.assertNotEqual(layer_violations(self.root), [])
        self.write(ARCHITECTURE,
                   "| folder | may include |\n|---|---|\n"
                   "| `pserver/store` | `common/transport` |\n\n"
                   "| folder | never includes |\n|---|---|\n"
                   "| `pserver` | `trainer` |\n")
        self.assertEqual(layer_violations(self.root), [])
        self.assertEqual(read_layers(self.root),
                         ({"pserver/store": ["common/transport"]},
                          {"pserver": ["trainer"]}))

    def test_the_page_has_both_tables(self):
        allowed, forbidden = read_layers()
        self.assertIn("pserver/store", allowed)
        self.assertEqual(allowed["base"], [])
        self.assertIn("trainer", forbidden["pserver"])
        self.assertIn("common/transport", forbidden["pserver/store"])

    def test_function_of_61_lines(self):
        body = "  x++;\n" * 59
        self.write("base/f.cc", "void F() {\n" + body + "}\n"
                   "void G() {\n" + body[7:] + "}\n")
        self.assertEqual(long_functions(self.root), {"base/f.cc F": 61})

    def test_class_over_its_files(self):
        # 402 lines declared, 300 more in two files: over 700 in none.
        decl = "class Big {\n" + "  int a;\n" * 400 + "};\n"
        method = "void Big::M%d() {\n" + "  x++;\n" * 73 + "}\n"
        self.write("base/big.h", decl)
        self.write("base/big.cc", "".join(method % i for i in range(2)))
        self.write("base/big_more.cc",
                   "".join(method % i for i in range(2, 4)))
        self.assertEqual(large_classes(self.root), {"Big": 402 + 4 * 75})

    def test_folder_of_31_files(self):
        for i in range(31):
            self.write(f"base/f{i}.h", "")
        self.assertEqual(full_folders(self.root), {"base": 31})

    def test_method_in_a_file_named_for_another_class(self):
        self.write("trainer/client/param_client.h", "class ParamClient {};\n")
        self.write("trainer/client/param_client_io.cc",
                   "void ParamClient::Io() {\n}\n")
        self.write("trainer/client/table_norms.cc",
                   "void ParamClient::Norms() {\n}\n")
        self.assertEqual(misplaced_definitions(self.root),
                         ["trainer/client/table_norms.cc: ParamClient"])

    def test_grpc_header_in_a_plain_file(self):
        self.write("pserver/service/handler.cc", "#include <grpcpp/grpcpp.h>\n")
        self.write("pserver/server/grpc_binding.cc",
                   "#include <grpcpp/grpcpp.h>\n")
        self.assertEqual(grpc_outside_grpc_files(self.root),
                         ["pserver/service/handler.cc"])

    def test_shared_region_in_the_handler(self):
        self.write("pserver/service/request_handler.cc",
                   '#include "common/transport/dense_value_lane.h"\n'
                   "// A SharedRegion in a comment is fine.\n"
                   "void F(const SharedRegion& r) {}\n")
        self.write("trainer/client/param_client.cc",
                   '#include "common/shared_memory/shared_calls.h"\n')
        self.write("trainer/client/param_client.h",
                   '#include "common/transport/dense_pull.h"\n')
        self.assertEqual(transport_in_paths(self.root), [
            "trainer/client/param_client.cc: common/shared_memory/shared_calls.h",
            "pserver/service/request_handler.cc: SharedRegion"])

    def test_known_list_both_ways(self):
        self.assertIn("over the limit", known({"a": 90}, {}, "functions"))
        self.assertIn("no longer over", known({}, {"a": 90}, "functions"))
        self.assertIn("grown past", known({"a": 91}, {"a": 90}, "functions"))
        self.assertEqual(known({"a": 85}, {"a": 90}, "functions"), "")
        self.assertEqual(known({"a": 90}, {"a": 90}, "functions"), "")


def main():
    global BIN_DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin_dir", default=None)
    args, rest = parser.parse_known_args()
    BIN_DIR = os.path.abspath(args.bin_dir) if args.bin_dir else None
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
