#!/usr/bin/env bash
# The one entry point on a fresh Debian 12 machine: install what is missing, build, run.
#   tools/dev/run.sh demo [bench args] build Release and run a small `epochfs bench` (plot in
#                                      build/demo.png)
#   tools/dev/run.sh test              check formatting and layering, then build and run the
#                                      whole test suite twice: Release with -Werror (preset ci)
#                                      and ASan+UBSan (preset asan), fuzzing the shuffle-file
#                                      parser for 30 s (libFuzzer, clang) in between
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(g++ cmake ninja-build pkg-config fuse3 libfuse3-dev libboost-dev libxxhash-dev
          libcli11-dev catch2 librapidcheck-dev clang-format clang-14 libfuzzer-14-dev
          python3-torch python3-torchvision python3-pytest python3-pil
          gnuplot-nox glusterfs-server glusterfs-client attr iproute2 procps
          e2fsprogs util-linux fio)

install_missing() {
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  echo "installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" </dev/null
}

build() {
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1"
}

# Builds the shuffle-file parser's libFuzzer target with clang and runs it for $1 seconds.
fuzz_parser() {
  cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DEPOCHFS_FUZZ=ON \
    -DEPOCHFS_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build/fuzz --target order_parser_fuzz
  local corpus
  corpus=$(mktemp -d)
  build/fuzz/test/order_parser_fuzz "$corpus" -max_total_time="$1" -max_len=8192 -seed=1 \
    -print_final_stats=1 2>&1 | tail -3
  local status=${PIPESTATUS[0]}
  rm -rf "$corpus"
  return "$status"
}

case "${1:-}" in
  demo)
    install_missing
    build release
    if (($# > 1)); then
      ./build/release/tools/epochfs bench "${@:2}"
    else
      ./build/release/tools/epochfs bench --files 2000 --epochs 2 --workers 4 --compute-ms 12 \
        --plot build/demo.png
    fi
    ;;
  test)
    install_missing
    tools/dev/check.sh
    build ci
    ctest --preset ci
    fuzz_parser 30
    build asan
    ctest --preset asan
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
