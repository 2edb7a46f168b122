#!/usr/bin/env bash
# The Debian package as an operator uses it: built by CPack from this build directory,
# installed with dpkg, its files where a node needs them (the binary, mount(8)'s helper link,
# the man page, the bash completion, the Python package and its wheel, the deployment examples
# and the docs), a mount made by mount(8) through the helper
# (as an fstab line or a systemd .mount unit does), a file read through it, the unmount, and
# the removal. Needs root and dpkg; exits 77 (skipped) without them, or when an epochfs
# package is installed on this machine already (the test does not replace it).
#   package_test.sh BUILD_DIR
set -euo pipefail
build=$1

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (dpkg -i)"
command -v dpkg >/dev/null && command -v cpack >/dev/null || skip "needs dpkg and cpack"
if dpkg-query -W -f='${Status}' epochfs 2>/dev/null | grep -q "ok installed"; then
  skip "an epochfs package is installed on this machine"
fi

work=$(mktemp -d)
installed=0
cleanup() {
  mountpoint -q "$work/mnt" && umount -l "$work/mnt"
  ((installed)) && dpkg -r epochfs >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cpack --config "$build/CPackConfig.cmake" -B "$work/pkg" >/dev/null
deb=$(ls "$work"/pkg/epochfs_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
[[ "$depends" != *xxhash* ]] || fail "the package depends on libxxhash"
# The product only: nothing of the lab or the fixture filesystems.
! dpkg-deb -c "$deb" | grep -E 'epochfs-(lab|slowfs|faultfs|gluster)' || fail "lab code packaged"

dpkg -i "$deb" >/dev/null
installed=1
/usr/bin/epochfs --version | grep -q "$(dpkg-deb -f "$deb" Version)" || fail "epochfs --version"
[ "$(readlink -f /usr/sbin/mount.fuse.epochfs)" = /usr/bin/epochfs ] || fail "no mount helper link"
# The binary needs nothing the Depends line does not name (xxHash is compiled in).
! ldd /usr/bin/epochfs | grep -q xxhash || fail "the binary links libxxhash"
[ -f /usr/share/doc/epochfs/examples/epochfs.fstab ] || fail "no fstab example"
[ -x /usr/share/doc/epochfs/examples/slurm-prolog.sh ] || fail "the Slurm prolog cannot run"
[ -x /usr/share/doc/epochfs/examples/slurm-epilog.sh ] || fail "the Slurm epilog cannot run"
for doc in copyright user-guide.md semantics.md stats.md; do
  [ -f "/usr/share/doc/epochfs/$doc" ] || fail "no $doc in /usr/share/doc/epochfs"
done
grep -q '^.SH EXAMPLES' /usr/share/man/man1/epochfs.1 || fail "no EXAMPLES in the man page"
ls /usr/share/epochfs/python/epochfs-*-py3-none-any.whl >/dev/null || fail "no wheel"
grep -q '^.TH EPOCHFS 1' /usr/share/man/man1/epochfs.1 || fail "no man page"
grep -q 'complete .* epochfs' /usr/share/bash-completion/completions/epochfs || fail "no completion"
# The container image's entrypoint (tools/deploy/Dockerfile) is the package's CSI plugin, and it
# runs with the packages the image adds (python3-grpcio, python3-protobuf: the Suggests line).
entrypoint=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)".*/\1/p' /usr/share/doc/epochfs/examples/Dockerfile)
[ -x "$entrypoint" ] || fail "the image's entrypoint $entrypoint is not installed"
for p in python3-grpcio python3-protobuf; do
  dpkg-deb -f "$deb" Suggests | grep -q "$p" || fail "Suggests lacks $p"
  grep -q "$p" /usr/share/doc/epochfs/examples/Dockerfile || fail "the image lacks $p"
done
(cd / && env -u PYTHONPATH "$entrypoint" --help | grep -q -- --source-root) || fail "epochfs-csi --help"
[ -f /usr/share/doc/epochfs/examples/csi-driver.yaml ] || fail "no CSI driver manifest"
# Debian's python3 finds the package with no PYTHONPATH, from anywhere.
module=$(cd / && env -u PYTHONPATH /usr/bin/python3 -c 'import epochfs; print(epochfs.__file__)')
[[ "$module" == /usr/lib/python3/dist-packages/epochfs/* ]] || fail "python: $module"

mkdir -p "$work/src/sub" "$work/mnt"
head -c 300000 /dev/urandom >"$work/src/sub/a.bin"
mount -t fuse.epochfs "$work/src" "$work/mnt" -o "cache_dir=$work/cache"
grep -q " $work/mnt fuse.epochfs " /proc/mounts || fail "not mounted as fuse.epochfs"
cmp "$work/src/sub/a.bin" "$work/mnt/sub/a.bin" || fail "the bytes read differ"
grep -q '"opens": 1' "$work/mnt/.epochfs/stats" || fail "the stats do not count the open"
umount "$work/mnt"
for _ in $(seq 100); do pgrep -f "epochfs.*$work/mnt" >/dev/null || break; sleep 0.1; done
! pgrep -f "epochfs.*$work/mnt" >/dev/null || fail "the daemon outlived its unmount"

dpkg -r epochfs >/dev/null
installed=0
[ ! -e /usr/bin/epochfs ] && [ ! -e /usr/sbin/mount.fuse.epochfs ] || fail "dpkg -r left files"
echo "the package installed, mounted, read, unmounted and was removed"
