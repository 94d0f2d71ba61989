#!/usr/bin/env bash
# Builds the CUDA-enabled programs here and packs them, with every shared
# library they need except CUDA's own, into one archive that runs on a GPU
# machine which has none of the project's Debian libraries:
#
#   bash scripts/gpu/gpu_bundle.sh            # build, pack, self-test
#   bash scripts/gpu/gpu_bundle.sh --no-test  # build and pack only
#
# Writes out/gpu/shardps-gpu.tar.xz (out/ is ignored by git) and, beside it,
# out/gpu/fashion-mnist/ (the Fashion-MNIST files the check trains on, from
# Debian's dataset-fashion-mnist). scripts/gpu/gpu_check.sh unpacks and runs it
# (docs/cuda.md, "The device check"); carry out/gpu to the device machine.
#
# The archive holds shardps-gpu/:
#   bin/NAME       a wrapper that starts libexec/NAME with the bundle's own
#                  loader (lib/ld-linux-x86-64.so.2) and libraries, so that
#                  neither the machine's C library nor LD_LIBRARY_PATH matter
#   libexec/NAME   the stripped programs: pserver, trainer, step_timer and
#                  the CUDA tests (cuda_backend_test, model_cuda_test,
#                  cuda_threshold_encoder_test)
#   lib/           gRPC, protobuf, Abseil, glog, gflags, OpenBLAS, zlib,
#                  OpenSSL, libstdc++, glibc and its loader, ... (not CUDA's:
#                  cudart, cuBLAS, cuDNN and the driver are found on the
#                  GPU machine; bin/NAME appends $BUNDLE_CUDA_LIBS, a
#                  colon-separated list of folders, to the search path)
#   MANIFEST       commit, build, CUDA and cuDNN versions the programs were
#                  built with, and where each library came from
#
# BUILD_DIR (default build-gpu/ of this repository) is the Release build
# folder; OUT_DIR (default out/gpu) where the archive goes.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build-gpu}"
OUT_DIR="${OUT_DIR:-$REPO/out/gpu}"
SELF_TEST=1
for arg in "$@"; do
  case "$arg" in
    --no-test) SELF_TEST=0 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_bundle: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

say() { echo "gpu_bundle: $*" >&2; }
die() { say "$*"; exit 1; }

PROGRAMS=(pserver/pserver trainer/trainer tools/step_timer
          kernels/cuda_backend_test trainer/model/model_cuda_test
          compression/cuda_threshold_encoder_test)
# What the GPU machine provides: the driver, CUDA's runtime and libraries,
# cuDNN (gpu_check.sh finds them, e.g. in PyTorch's nvidia/ packages).
CUDA_LIBS='^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc[-a-z_.0-9]*|nvJitLink|nvidia-[a-z-]*)\.so'

bash "$REPO/scripts/setup/setup.sh" >&2
for tool in strip xz tar ldd; do
  command -v "$tool" >/dev/null || die "$tool is needed (apt-get install binutils xz-utils)"
done

say "configuring $BUILD_DIR (Release, CUDA)"
if ! cfg="$(cmake -S "$REPO" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
    -DPS_BUILD_BENCHMARKS=OFF -DSHARDPS_WITH_CUDA=ON 2>&1)"; then
  echo "$cfg" >&2
  die "cmake could not configure $BUILD_DIR"
fi
grep -q '^PS_CUDA_BUILT:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt" ||
  die "CMake built no CUDA backend (nvcc and cuDNN are needed: $(echo "$cfg" | grep -i cuda | tail -1))"
targets=()
for p in "${PROGRAMS[@]}"; do targets+=("$(basename "$p")"); done
say "building ${targets[*]} (cmake --build $BUILD_DIR -j2)"
cmake --build "$BUILD_DIR" -j2 --target "${targets[@]}" >&2

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
done < <(for p in "${PROGRAMS[@]}"; do ldd "$BUILD_DIR/$p"; done |
           awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
loader="$(readlink -f /lib64/ld-linux-x86-64.so.2)"
cp "$loader" "$B/lib/ld-linux-x86-64.so.2"
chmod 755 "$B/lib/ld-linux-x86-64.so.2"
manifest_libs+=("ld-linux-x86-64.so.2  $loader  libc6 $(dpkg-query -W -f='${Version}' libc6)")

cudnn_h="$(grep -E '^CUDNN_INCLUDE_DIR:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)/cudnn_version.h"
cudnn_ver="$(awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{printf "%s%s", sep, $3; sep="."}' "$cudnn_h" 2>/dev/null || true)"
{
  echo "shardps-gpu bundle"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "build type: Release; CUDA code for: $(grep -ohE 'code=\[[a-z_0-9,]+' "$BUILD_DIR/kernels/CMakeFiles/ps_cuda.dir/flags.make" 2>/dev/null | sed 's/code=\[//' | tr '\n' ',' | sed 's/,$//')"
  echo "nvcc: $("$(grep -E '^CMAKE_CUDA_COMPILER:' "$BUILD_DIR/CMakeCache.txt" | cut -d= -f2)" --version 2>/dev/null | grep -oE 'release [0-9.]+, V[0-9.]+' || echo '?')"
  echo "cuDNN headers: ${cudnn_ver:-?}"
  echo "programs: ${targets[*]}"
  echo "needs at run time (not bundled): the NVIDIA driver (libcuda.so.1), libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcudnn.so.9 and its sub-libraries"
  echo "libraries (soname, source, Debian package and version):"
  printf '  %s\n' "${manifest_libs[@]}"
} >"$B/MANIFEST"

mkdir -p "$OUT_DIR"
archive="$OUT_DIR/shardps-gpu.tar.xz"
say "packing $archive (xz -6)"
tar -C "$STAGE" -cf - shardps-gpu | xz -6 -T2 >"$archive.tmp"
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
