#!/usr/bin/env bash
# Builds the codec's libFuzzer target (fuzz_codec.c, with ASan and UBSan) and runs it for
# ${FUZZ_SECONDS:-60} seconds on a scratch copy of the seed corpus (corpus/codec/). Exits
# non-zero on any crash, leak, sanitizer report or round-trip mismatch; the crashing input
# is kept in build/fuzz/artifacts/. Needs clang with libclang-rt-14-dev and libisal-dev.
# Usage (from the repository root or anywhere): bash agents/mrc/core/fuzz.sh
set -euo pipefail

core_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$core_dir/../../.." && pwd)"
build_dir="${FUZZ_BUILD_DIR:-$root/build/fuzz}"
seconds="${FUZZ_SECONDS:-60}"
cc="${CC_FUZZ:-clang}"

mkdir -p "$build_dir/artifacts"
"$cc" -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wextra -Werror -ffp-contract=off -I"$core_dir" \
    "$core_dir/fuzz_codec.c" "$core_dir/mrcn_codec.c" "$core_dir/mrcn.c" \
    -lisal -o "$build_dir/fuzz_codec"

scratch="$(mktemp -d "$build_dir/corpus.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
cp "$core_dir/corpus/codec/"* "$scratch/"

# libFuzzer exits non-zero on a crash; set -e passes that on.
"$build_dir/fuzz_codec" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$build_dir/artifacts/" "$scratch"
