#!/usr/bin/env python3
"""Checks of the code's shape (docs/architecture.md, "Rules"), as a test.

- No source file outside tests is longer than 600 lines.
- No function (C++ or Python, tests included) is longer than 120 lines.
- gRPC headers (grpcpp/, grpc/, *.grpc.pb.h) are included only by files
  whose names say they are a gRPC binding, server or client.
- Dependencies point one way: the include rules of LAYERS below.
- The core libraries link without gRPC: their test programs do not load
  libgrpc (and the gRPC binding's test does, so the check can fail).

Standard library only:  python3 tests/structure_test.py --bin_dir build
"""

import argparse
import ast
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
BIN_DIR = None

SOURCE_DIRS = ["base", "common", "compression", "kernels", "optimizer", "proto",
               "pserver",
               "trainer", "tools", "benchmarks", "scripts", "tests"]
CPP_EXT = (".h", ".cc", ".cu")

# Folder -> folders (and absl, std, third-party headers) its non-test
# sources may include. A folder may always include itself.
LAYERS = {
    "base": [],
    "kernels": ["base"],
    "compression": ["base", "kernels", "proto"],
    "common": ["base", "proto"],
    "optimizer": ["base", "kernels", "proto"],
    "pserver": ["base", "common", "compression", "kernels", "optimizer",
                "proto"],
    "trainer/data": ["base", "common", "proto"],
    "trainer/model": ["base", "common", "kernels", "proto", "trainer/data"],
    "trainer/client": ["base", "common", "compression", "proto", "pserver"],
    "trainer": ["base", "common", "compression", "kernels", "optimizer",
                "proto", "trainer/data", "trainer/model", "trainer/client"],
    "tools": ["base", "common", "kernels", "proto", "trainer",
              "trainer/data", "trainer/model", "trainer/client"],
}
# Within trainer/client, only the in-process client reaches the pserver.
PSERVER_FROM_CLIENT = {"trainer/client/in_process_ps_client.h",
                       "trainer/client/in_process_ps_client.cc"}


def rel(path):
    return os.path.relpath(path, ROOT)


def is_test(path):
    r = rel(path)
    return (r.startswith("tests/") or "/testing/" in r or
            re.search(r"_test\.(cc|py)$", r) is not None)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def source_files(exts):
    for d in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
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


CONTROL = {"if", "for", "while", "switch", "catch", "return", "else", "do"}
FUNCTION_HEAD = re.compile(
    r"\)\s*(const)?\s*(noexcept)?\s*(override|final)?\s*"
    r"(ABSL_[A-Z_]+\([^()]*\)\s*)*(->\s*[\w:<>,\s\*&]+)?\s*$")


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
                paren = head.rfind("(")
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


class StructureTest(unittest.TestCase):

    def test_no_source_file_over_600_lines(self):
        long = []
        for path in source_files(CPP_EXT + (".py", ".sh", ".proto")):
            if is_test(path):
                continue
            n = read(path).count("\n")
            if n > MAX_FILE_LINES:
                long.append(f"{rel(path)}: {n} lines")
        self.assertEqual(long, [], "files over %d lines" % MAX_FILE_LINES)

    def test_no_function_over_120_lines(self):
        long = []
        for path in source_files(CPP_EXT):
            for start, end, name in cpp_functions(path):
                if end - start + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{rel(path)}:{start} {name}: {end - start + 1}")
        for path in source_files((".py",)):
            for start, end, name in py_functions(path):
                if end - start + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{rel(path)}:{start} {name}: {end - start + 1}")
        self.assertEqual(long, [], "functions over %d lines" % MAX_FUNCTION_LINES)

    def test_function_finder_sees_a_known_function(self):
        # The heuristic must find what it checks.
        found = cpp_functions(os.path.join(ROOT, "pserver/parameter_store.cc"))
        names = [name for _, _, name in found]
        self.assertIn("ParameterStore::ApplyPushLocked", names)
        self.assertGreater(len(found), 20)

    def test_grpc_headers_only_in_grpc_files(self):
        bad = []
        pattern = re.compile(
            r'#include\s+[<"](grpcpp/|grpc/|[^">]*\.grpc\.pb\.h)')
        for path in source_files(CPP_EXT):
            if pattern.search(read(path)) and "grpc" not in os.path.basename(path):
                bad.append(rel(path))
        self.assertEqual(bad, [], "gRPC headers in files not named grpc")

    def test_dependencies_point_one_way(self):
        bad = []
        include = re.compile(r'#include\s+"([^"]+)"')
        for path in source_files(CPP_EXT):
            if is_test(path):
                continue
            r = rel(path)
            folder = os.path.dirname(r)
            if folder not in LAYERS:
                continue
            allowed = set(LAYERS[folder]) | {folder}
            for target in include.findall(read(path)):
                target_folder = os.path.dirname(target)
                if target.split("/")[0] not in SOURCE_DIRS:
                    continue  # a library's header, not a layer of ours
                if target_folder == "pserver" and folder == "trainer/client":
                    if r not in PSERVER_FROM_CLIENT:
                        bad.append(f"{r} includes {target}")
                    continue
                if target_folder not in allowed:
                    bad.append(f"{r} includes {target}")
        self.assertEqual(bad, [], "includes against the layering")

    def test_core_libraries_link_without_grpc(self):
        if BIN_DIR is None:
            self.skipTest("no --bin_dir")
        core = ["pserver/parameter_store_test", "pserver/pserver_service_test",
                "trainer/trainer_test", "trainer/client/client_test",
                "trainer/client/sparse_client_test",
                "trainer/sync_equivalence_test"]
        linked = {}
        for b in core + ["pserver/pserver_grpc_test"]:
            path = os.path.join(BIN_DIR, b)
            self.assertTrue(os.path.exists(path), path)
            libs = subprocess.run(["ldd", path], capture_output=True,
                                  text=True, check=True).stdout
            linked[b] = "libgrpc" in libs
        self.assertTrue(linked["pserver/pserver_grpc_test"],
                        "the check cannot see gRPC: ldd shows none anywhere")
        self.assertEqual([b for b in core if linked[b]], [],
                         "core libraries that link gRPC")


def main():
    global BIN_DIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin_dir", default=None)
    args, rest = parser.parse_known_args()
    BIN_DIR = os.path.abspath(args.bin_dir) if args.bin_dir else None
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
