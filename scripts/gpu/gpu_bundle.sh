#!/usr/bin/env bash
# Builds the CUDA-enabled programs here and packs them, with every shared
# library they need except CUDA's own, into one archive that runs on a GPU
# machine which has none of the project's Debian libraries:
#
#   bash scripts/gpu/gpu_bundle.sh             # build, pack, self-test
#   bash scripts/gpu/gpu_bundle.sh --no-test   # build and pack only
#   BUILD_DIR=build bash scripts/gpu/gpu_bundle.sh --no-build --no-test
#                      # pack what BUILD_DIR (a CUDA build) already holds,
#                      # without setup.sh or CMake (tests/gpu_check_test.py)
#
# Writes out/gpu/shardps-gpu.tar.xz (out/ is ignored by git) and, beside it,
# out/gpu/fashion-mnist/ (the Fashion-MNIST files the check trains on, from
# Debian's dataset-fashion-mnist; examples/torch_deepfm.py's data is made
# there by gen_ctr_data). scripts/gpu/gpu_check.sh unpacks and runs it
# (docs/cuda.md, "The device check"); carry out/gpu to the device machine.
#
# The archive holds shardps-gpu/:
#   bin/NAME       a wrapper that starts libexec/NAME with the bundle's own
#                  loader (lib/ld-linux-x86-64.so.2) and libraries, so that
#                  neither the machine's C library nor LD_LIBRARY_PATH matter
#   libexec/NAME   the stripped programs: pserver, trainer, step_timer,
#                  gen_ctr_data (examples/torch_deepfm.py's data) and the
#                  CUDA tests (cuda_backend_test, model_cuda_test,
#                  cuda_threshold_encoder_test)
#   lib/           gRPC, protobuf, Abseil, glog, gflags, OpenBLAS, zlib,
#                  OpenSSL, libstdc++, glibc and its loader, ... (not CUDA's:
#                  cudart, cuBLAS, cuDNN and the driver are found on the
#                  GPU machine; bin/NAME appends $BUNDLE_CUDA_LIBS, a
#                  colon-separated list of folders, to the search path)
#   python/shardps the shardps package (python/shardps/*.py) and its native
#                  module, stripped: every _native.cpython-3XY-*.so in the
#                  build's SHARDPS_PYTHON_MODULE_DIR (CMake builds it for
#                  the Python it finds, Debian's 3.11)
#   python/lib     links to the libraries of lib/ that the native module
#                  needs, but glibc's, libstdc++ and libgcc_s: a machine's
#                  own python3 loads the module with LD_LIBRARY_PATH set to
#                  it (its own loader and C library stay in charge)
#   python/lib-cxx links to lib/'s libstdc++ and libgcc_s, for a machine
#                  whose own are older than the module needs
#   MANIFEST       commit, build, CUDA and cuDNN versions the programs were
#                  built with, and where each library came from
#
# BUILD_DIR (default build-gpu/ of this repository) is the Release build
# folder; OUT_DIR (default out/gpu) where the archive goes; XZ_LEVEL (default
# 6) xz's preset (tests pack with 0, faster and larger).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build-gpu}"
OUT_DIR="${OUT_DIR:-$REPO/out/gpu}"
XZ_LEVEL="${XZ_LEVEL:-6}"
SELF_TEST=1
BUILD=1
for arg in "$@"; do
  case "$arg" in
    --no-test) SELF_TEST=0 ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "gpu_bundle: $*" >&2; }
die() { say "$*"; exit 1; }

PROGRAMS=(pserver/pserver trainer/trainer tools/step_timer tools/gen_ctr_data
          kernels/cuda/cuda_backend_test trainer/model/model_cuda_test
          compression/cuda_threshold_encoder_test)
# What the GPU machine provides: the driver, CUDA's runtime and libraries,
# cuDNN (gpu_check.sh finds them, e.g. in PyTorch's nvidia/ packages).
CUDA_LIBS='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc[-a-z_.0-9]*|nvJitLink|nvidia-[a-z-]*)\.so'
# What a machine's own python3 brings and the native module must share:
# glibc (its loader loads the module), and the C++ runtime (python/lib-cxx).
GLIBC_LIBS='^(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|ld-linux-x86-64)\.so'
CXX_LIBS='^(libstdc\+\+|libgcc_s)\.so'

# newest_version PREFIX FILE...: the newest symbol version (GLIBC_,
# GLIBCXX_) the files need, e.g. GLIBC_2.34.
newest_version() {
  local prefix="$1"; shift
  objdump -T "$@" 2>/dev/null | grep -oE "\b${prefix}_[0-9]+(\.[0-9]+)+" |
    sort -uV | tail -1
}

# pack_python: python/shardps (the package and each native module,
# stripped), python/lib and python/lib-cxx (links into lib/; see above).
pack_python() {
  local m name soname path ver closure
  mkdir -p "$B/python/shardps" "$B/python/lib" "$B/python/lib-cxx"
  cp "$REPO"/python/shardps/*.py "$B/python/shardps/"
  PY_NOTES=()
  for m in "${MODULES[@]}"; do
    name="$(basename "$m")"
    strip --strip-unneeded -o "$B/python/shardps/$name" "$m"
    closure=("$m")
    while read -r soname path; do
      if [[ "$soname" =~ $CUDA_LIBS ]] || [[ "$soname" =~ $GLIBC_LIBS ]]; then continue; fi
      if [[ "$soname" =~ $CXX_LIBS ]]; then
        ln -sfn "../../lib/$soname" "$B/python/lib-cxx/$soname"
        continue
      fi
      [ -f "$B/lib/$soname" ] || die "$soname (of $name) is not in the bundle's lib/"
      ln -sfn "../../lib/$soname" "$B/python/lib/$soname"
      closure+=("$path")
    done < <(ldd "$m" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
    ver="$(echo "$name" | sed -E 's/^_native\.cpython-3([0-9]+)-.*/3.\1/')"
    PY_NOTES+=("Python $ver ($name, needs $(newest_version GLIBC "${closure[@]}"), $(newest_version GLIBCXX "${closure[@]}"))")
  done
}

[ "$BUILD" = 1 ] && bash "$REPO/scripts/setup/setup.sh" >&2
for tool in strip xz tar ldd objdump; do
  command -v "$tool" >/dev/null || die "$tool is needed (apt-get install binutils xz-utils)"
done

targets=()
for p in "${PROGRAMS[@]}"; do targets+=("$(basename "$p")"); done
if [ "$BUILD" = 1 ]; then
  # The native module goes into the build folder, not python/shardps of
  # the source tree (which build/ fills for the tests).
  say "configuring $BUILD_DIR (Release, CUDA)"
  if ! cfg="$(cmake -S "$REPO" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
      -DPS_BUILD_BENCHMARKS=OFF -DSHARDPS_WITH_CUDA=ON \
      -DSHARDPS_PYTHON_MODULE_DIR="$BUILD_DIR/python/shardps" 2>&1)"; then
    echo "$cfg" >&2
    die "cmake could not configure $BUILD_DIR"
  fi
  grep -q '^PS_CUDA_BUILT:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt" ||
    die "CMake built no CUDA backend (nvcc and cuDNN are needed: $(echo "$cfg" | grep -i cuda | tail -1))"
  echo "$cfg" | grep -q 'shardps._native: not built' &&
    die "CMake will not build shardps._native (pybind11-dev and python3-dev: bash scripts/setup/setup.sh)"
  say "building ${targets[*]} shardps_native (cmake --build $BUILD_DIR -j2)"
  cmake --build "$BUILD_DIR" -j2 --target "${targets[@]}" shardps_native >&2
else
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || die "--no-build: no CMake build in $BUILD_DIR (set BUILD_DIR)"
  grep -q '^PS_CUDA_BUILT:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt" ||
    die "--no-build: $BUILD_DIR is not a CUDA build (PS_CUDA_BUILT is not ON)"
  for p in "${PROGRAMS[@]}"; do
    [ -x "$BUILD_DIR/$p" ] || die "--no-build: no $BUILD_DIR/$p (cmake --build $BUILD_DIR --target $(basename "$p"))"
  done
  say "--no-build: packing what $BUILD_DIR holds"
fi
MODULE_DIR="$(grep -E '^SHARDPS_PYTHON_MODULE_DIR:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2-)"
MODULES=()
for m in "${MODULE_DIR:-/nonexistent}"/_native.cpython-3*-x86_64-linux-gnu.so; do
  [ -f "$m" ] && MODULES+=("$m")
done
[ ${#MODULES[@]} -gt 0 ] ||
  die "no shardps._native in ${MODULE_DIR:-?} (SHARDPS_PYTHON_MODULE_DIR of $BUILD_DIR; cmake --build $BUILD_DIR --target shardps_native)"

STAGE="$(mktemp -d "${TMPDIR:-/tmp}/shardps-gpu-stage-XXXX")"
trap 'rm -rf "$STAGE"' EXIT
B="$STAGE/shardps-gpu"
mkdir -p "$B/bin" "$B/libexec" "$B/lib"

# The programs, stripped, and a wrapper for each.
for p in "${PROGRAMS[@]}"; do
  name="$(basename "$p")"
  strip --strip-unneeded -o "$B/libexec/$name" "$BUILD_DIR/$p"
  cat >"$B/bin/$name" <<'EOF'
#!/bin/sh
# Starts the program of the same name in ../libexec with the bundle's own
# loader and libraries; $BUNDLE_CUDA_LIBS (folders, colon-separated) holds
# CUDA's libraries and the driver's.
here="$(cd "$(dirname "$0")/.." && pwd)"
name="$(basename "$0")"
exec "$here/lib/ld-linux-x86-64.so.2" \
  --library-path "$here/lib${BUNDLE_CUDA_LIBS:+:$BUNDLE_CUDA_LIBS}" \
  --argv0 "$0" "$here/libexec/$name" "$@"
EOF
  chmod 755 "$B/bin/$name"
done

# Every library the programs load, but CUDA's, under its soname.
manifest_libs=()
while read -r soname path; do
  if [[ "$soname" =~ $CUDA_LIBS ]]; then continue; fi
  [ -f "$path" ] || die "$soname: ldd found no file ($path)"
  real="$(readlink -f "$path")"
  cp "$real" "$B/lib/$soname"
  chmod 644 "$B/lib/$soname"
  pkg="$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1 || true)"
  if [ -z "$pkg" ]; then pkg="$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1 || true)"; fi
  ver="$( [ -n "$pkg" ] && dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '?')"
  manifest_libs+=("$soname  $real  ${pkg:-?} $ver")
done < <({ for p in "${PROGRAMS[@]}"; do ldd "$BUILD_DIR/$p"; done
           for m in "${MODULES[@]}"; do ldd "$m"; done; } |
           awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
loader="$(readlink -f /lib64/ld-linux-x86-64.so.2)"
cp "$loader" "$B/lib/ld-linux-x86-64.so.2"
chmod 755 "$B/lib/ld-linux-x86-64.so.2"
manifest_libs+=("ld-linux-x86-64.so.2  $loader  libc6 $(dpkg-query -W -f='${Version}' libc6)")

pack_python

cudnn_h="$(grep -E '^CUDNN_INCLUDE_DIR:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)/cudnn_version.h"
cudnn_ver="$(awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{printf "%s%s", sep, $3; sep="."}' "$cudnn_h" 2>/dev/null || true)"
{
  echo "shardps-gpu bundle"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "build type: $(grep -E '^CMAKE_BUILD_TYPE:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2-); CUDA code for: $(grep -ohE 'code=\[[a-z_0-9,]+' "$BUILD_DIR/kernels/cuda/CMakeFiles/ps_cuda.dir/flags.make" 2>/dev/null | sed 's/code=\[//' | tr '\n' ',' | sed 's/,$//')"
  echo "nvcc: $("$(grep -E '^CMAKE_CUDA_COMPILER:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)" --version 2>/dev/null | grep -oE 'release [0-9.]+, V[0-9.]+' || echo '?')"
  echo "cuDNN headers: ${cudnn_ver:-?}"
  echo "programs: ${targets[*]}"
  echo "python modules: $(printf '%s; ' "${PY_NOTES[@]}" | sed 's/; $//')"
  echo "needs at run time (not bundled): the NVIDIA driver (libcuda.so.1), libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcudnn.so.9 and its sub-libraries"
  echo "libraries (soname, source, Debian package and version):"
  printf '  %s\n' "${manifest_libs[@]}"
} >"$B/MANIFEST"

mkdir -p "$OUT_DIR"
archive="$OUT_DIR/shardps-gpu.tar.xz"
say "packing $archive (xz -$XZ_LEVEL)"
tar -C "$STAGE" -cf - shardps-gpu | xz "-$XZ_LEVEL" -T2 >"$archive.tmp"
mv "$archive.tmp" "$archive"

# The training data of the device check (configs/fmnist_*.pbtxt).
data_src=/usr/share/datasets/fashion-mnist
mkdir -p "$OUT_DIR/fashion-mnist"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \
         t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$data_src/$f" ] || die "no $data_src/$f (apt-get install dataset-fashion-mnist)"
  cmp -s "$data_src/$f" "$OUT_DIR/fashion-mnist/$f" 2>/dev/null ||
    cp "$data_src/$f" "$OUT_DIR/fashion-mnist/$f"
done

unpacked="$(du -sb "$B" | cut -f1)"
packed="$(stat -c %s "$archive")"
data="$(du -sb "$OUT_DIR/fashion-mnist" | cut -f1)"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
say "bundle $(mib "$packed") MiB ($(mib "$unpacked") MiB unpacked," \
    "$(ls "$B/lib" | wc -l) libraries), data $(mib "$data") MiB:" \
    "$(mib $((packed + data))) MiB to carry (the device tool takes 64 MiB" \
    "with the working tree)"

if [ "$SELF_TEST" = 1 ]; then
  bash "$REPO/scripts/gpu/gpu_bundle_test.sh" "$archive"
fi
echo "$archive"
