#!/usr/bin/env bash
# Builds compression/threshold_codec_fuzz.cc with clang's libFuzzer and AddressSanitizer
# and runs it briefly; fails on any crash. Exits 77 (ctest's skip code) when
# clang or libFuzzer is missing.
#   tests/fuzz_codec.sh [SOURCE_DIR] [BUILD_DIR] [SECONDS]
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
build=${2:-$src/build}
seconds=${3:-20}

cxx=$(command -v clang++ || command -v clang++-14 || true)
if [ -z "$cxx" ]; then
  echo "fuzz_codec: SKIP: clang++ not found"
  exit 77
fi
if ! absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings \
    absl_str_format_internal 2>/dev/null); then
  echo "fuzz_codec: SKIP: pkg-config cannot find abseil"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
probe_src="$tmp/probe.cc"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe_src"
if ! "$cxx" -fsanitize=fuzzer,address "$probe_src" -o "$tmp/probe" 2>/dev/null; then
  echo "fuzz_codec: SKIP: $cxx has no libFuzzer (install libclang-rt-14-dev)"
  exit 77
fi

"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I"$src" -I"$build" \
  "$src/compression/threshold_codec_fuzz.cc" "$src/compression/threshold_codec.cc" \
  $absl_libs -o "$tmp/threshold_codec_fuzz"

mkdir -p "$tmp/corpus"
# Seeds: the upstream bitmap vector and a threshold message, each for N = 15
# (size index 2), and a small encode input.
printf '\x02\x06\x00\x00\x00\x0f\x00\x00\x00\x6f\x12\x83\x3a\x01\x00\x00\x00\x0c\x00\x0a\x00' \
  >"$tmp/corpus/bitmap"
printf '\x02\x02\x00\x00\x00\x0f\x00\x00\x00\x6f\x12\x83\x3a\x00\x00\x00\x00\x01\x00\x00\x00\xfb\xff\xff\xff' \
  >"$tmp/corpus/threshold"
printf '\x81\x00\x00\x80\x3f\x00\x00\x80\xbf\x6f\x12\x83\x3a' >"$tmp/corpus/encode"

# A crashing input is kept as $build/threshold_codec_fuzz-crash-*.
cd "$tmp"
set +e
"$tmp/threshold_codec_fuzz" -max_total_time="$seconds" -max_len=4200 \
  -print_final_stats=1 -artifact_prefix="$build/threshold_codec_fuzz-" \
  "$tmp/corpus" >"$tmp/log" 2>&1
status=$?
set -e
tail -n 30 "$tmp/log"
echo "fuzz_codec: libFuzzer exit status $status"
exit "$status"
