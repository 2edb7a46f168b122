#!/usr/bin/env bash
# The one entry point on a fresh Debian 12 machine: install what is missing, build, run.
#   tools/dev/run.sh demo [bench args] build Release and run a small `epochfs-lab bench` (plot in
#                                      build/demo.png)
#   tools/dev/run.sh test              check formatting and layering, then build and run the
#                                      whole test suite twice: Release with -Werror (preset ci)
#                                      and ASan+UBSan (preset asan; all but two slow load tests),
#                                      fuzzing the shuffle-file parser for 30 s (libFuzzer, clang)
#                                      and clang's thread-safety build and clang-tidy in between;
#                                      then the concurrency tests under TSan
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(g++ cmake ninja-build pkg-config fuse3 libfuse3-dev liburing-dev libboost-dev libxxhash-dev
          libcli11-dev nlohmann-json3-dev catch2 librapidcheck-dev clang-format clang-14 clang-tidy
          libfuzzer-14-dev
          python3-torch python3-torchvision python3-pytest python3-pil python3-hypothesis
          python3-pip python3-setuptools python3-wheel python3-venv python3-h5py python3-lmdb
          protobuf-compiler libprotobuf-dev python3-grpcio python3-protobuf python3-yaml
          gnuplot-nox glusterfs-server glusterfs-client attr iproute2 procps
          e2fsprogs util-linux fio gdb)

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
  local corpus log status=0
  corpus=$(mktemp -d)
  log=$(mktemp)
  build/fuzz/test/order_parser_fuzz "$corpus" -max_total_time="$1" -max_len=8192 -seed=1 \
    -print_final_stats=1 -artifact_prefix="$corpus/" >"$log" 2>&1 || status=$?
  # On a find, what it was: the stack, the input (its bytes and base64), not only the stats.
  if ((status != 0)); then grep -v '^#[0-9]' "$log" | tail -40; else tail -3 "$log"; fi
  rm -rf "$corpus" "$log"
  return "$status"
}

# The checked contracts: the core and the shipped binary built with clang's thread-safety
# analysis as errors (GUARDED_BY, REQUIRES, EXCLUDES compile away with g++), then clang-tidy
# with the project's .clang-tidy over the core (its WarningsAsErrors fail the run).
checked_contracts() {
  cmake --preset clang-tsa >/dev/null
  cmake --build --preset clang-tsa --target epochfs
  clang-tidy-14 -p build/clang-tsa --quiet cachestore/*.cc prefetch/*.cc fusefs/*.cc
}

# The concurrency tests under ThreadSanitizer: the unit tests, and the mount tests with many
# readers, faults and churn (docs/reliability.md L1, L3, L4, F4-F7, C5, C7). A report aborts the
# process it is in (halt_on_error): a test binary fails, or a daemon dies under its mount and
# the mount test fails. test/tsan.supp says why one kind of report is not a race.
tsan_tests() {
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/test/tsan.supp"
  build/tsan/test/cachestore_tests
  build/tsan/test/prefetch_tests
  build/tsan/test/fusefs_tests
  build/tsan/test/mount_tests "[swarm],[faults],a same-size rewrite*,a cached copy damaged*,a dataset 3x the cache*"
}

case "${1:-}" in
  demo)
    install_missing
    build release
    if (($# > 1)); then
      ./build/release/bin/epochfs-lab bench "${@:2}"
    else
      ./build/release/bin/epochfs-lab bench --files 2000 --epochs 2 --workers 4 --compute-ms 12 \
        --plot build/demo.png
    fi
    ;;
  test)
    install_missing
    tools/dev/check.sh
    build ci
    ctest --preset ci
    fuzz_parser 30
    checked_contracts
    build asan
    ctest --preset asan
    build tsan
    tsan_tests
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
