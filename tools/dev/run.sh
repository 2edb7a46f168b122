#!/usr/bin/env bash
# The one entry point on a fresh Debian 12 machine: install what is missing, build, run.
#   tools/dev/run.sh demo [demo args]  build Release and run the demo
#   tools/dev/run.sh test              check formatting and layering, then build and run the
#                                      whole test suite twice: Release with -Werror (preset ci)
#                                      and ASan+UBSan (preset asan)
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(g++ cmake ninja-build pkg-config fuse3 libfuse3-dev libboost-dev libxxhash-dev
          libcli11-dev catch2 clang-format)

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

case "${1:-}" in
  demo)
    install_missing
    build release
    ./build/release/tools/epochfs demo "${@:2}"
    ;;
  test)
    install_missing
    tools/dev/check.sh
    build ci
    ctest --preset ci
    build asan
    ctest --preset asan
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
