"""pip install ./python: builds shardps._native with this repository's CMake
build (the target shardps_native only, no tests, benchmarks or CUDA) and
installs the shardps package. Needs the build dependencies that
scripts/setup/setup.sh installs (gRPC, protobuf, Abseil, pybind11-dev, ...),
and takes as long as that part of the build (about 10 minutes on 2 cores).
SHARDPS_BUILD_JOBS sets the parallel jobs (default: the CPU count)."""

import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out = os.path.dirname(os.path.abspath(self.get_ext_fullpath(
            ext.name)))
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build, exist_ok=True)
        jobs = os.environ.get("SHARDPS_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(
            ["cmake", "-S", REPO, "-B", build,
             "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DPS_BUILD_TESTS=OFF",
             "-DPS_BUILD_BENCHMARKS=OFF", "-DSHARDPS_WITH_CUDA=OFF",
             "-DPython3_EXECUTABLE=" + sys.executable,
             "-DSHARDPS_PYTHON_MODULE_DIR=" + out])
        subprocess.check_call(["cmake", "--build", build, "--target",
                               "shardps_native", "-j", jobs])


setup(
    name="shardps",
    version="0.1.0",
    description="ShardPS parameter server: the Python and PyTorch client",
    packages=["shardps"],
    ext_modules=[Extension("shardps._native", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    extras_require={"torch": ["torch>=2.0"]},
)
