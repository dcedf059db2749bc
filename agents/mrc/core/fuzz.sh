#!/usr/bin/env bash
# Builds the native engine's libFuzzer targets (ASan and UBSan) and runs each for
# ${FUZZ_SECONDS:-60} seconds on a scratch copy of its seed corpus:
#   fuzz_codec.c  the wire decoder (decode, re-encode, same bytes)   corpus/codec/
#   fuzz_qp.c     a sequence of datagrams and timer ticks fed to one QP   corpus/qp/
#   fuzz_delay.c  pushes, time and releases against a model of the delay line   corpus/delay/
# Exits non-zero on any crash, leak, sanitizer report or broken invariant; the input that
# caused it is kept in build/fuzz/artifacts/. Needs clang with libclang-rt-14-dev and libisal-dev.
# Usage (from the repository root or anywhere): bash agents/mrc/core/fuzz.sh [TARGET...]
set -euo pipefail

core_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$core_dir/../../.." && pwd)"
build_dir="${FUZZ_BUILD_DIR:-$root/build/fuzz}"
seconds="${FUZZ_SECONDS:-60}"
cc="${CC_FUZZ:-clang}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(codec qp delay)

mkdir -p "$build_dir/artifacts"
scratch="$(mktemp -d "$build_dir/corpus.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
flags=(-std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Wall -Wextra -Werror -ffp-contract=off -I"$core_dir")
for target in "${targets[@]}"; do
    case "$target" in
    codec) sources=("$core_dir/mrcn_codec.c" "$core_dir/mrcn.c"); max_len=() ;;
    # the whole engine but the endpoint and its poller (sockets); records of up to a jumbo datagram
    qp) mapfile -t sources < <(ls "$core_dir"/mrcn*.c | grep -v -e mrcn_endpoint.c -e mrcn_poller.c)
        max_len=(-max_len=16384) ;;
    delay) sources=("$core_dir/mrcn_delay.c"); max_len=() ;;
    *) echo "fuzz.sh: unknown target $target (codec, qp, delay)" >&2; exit 2 ;;
    esac
    "$cc" "${flags[@]}" "$core_dir/fuzz_$target.c" "${sources[@]}" -lisal -lm -o "$build_dir/fuzz_$target"
    mkdir -p "$scratch/$target"
    cp "$core_dir/corpus/$target/"* "$scratch/$target/"
    echo "fuzz.sh: fuzz_$target for $seconds s"
    # libFuzzer exits non-zero on a crash; set -e passes that on.
    "$build_dir/fuzz_$target" -max_total_time="$seconds" -print_final_stats=1 "${max_len[@]}" \
        -artifact_prefix="$build_dir/artifacts/$target-" "$scratch/$target"
done
