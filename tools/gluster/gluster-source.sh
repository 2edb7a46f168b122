#!/bin/bash
# A real network filesystem as the benchmark's shared storage: GlusterFS serving one brick
# from a network namespace, its FUSE client in a second one, the two joined by a veth pair
# rate-limited with tbf in both directions (netem is not available, so the wire adds no
# delay beyond the veth's own). The mount itself lands in the caller's mount namespace;
# all traffic stays on the veth pair inside the two namespaces made here.
#
#   gluster-source.sh up BRICK MOUNTPOINT RATE_MBIT   serve BRICK at MOUNTPOINT
#   gluster-source.sh down BRICK MOUNTPOINT           undo all of it (safe to repeat)
#
# Needs root and Debian's glusterfs-server and glusterfs-client. One at a time per machine
# (glusterd is one daemon with its state in /var/lib/glusterd); an existing glusterd is an
# error. BRICK keeps its files; what GlusterFS adds (.glusterfs, the volume id) is removed
# by `down`.
set -euo pipefail

readonly SERVER_NS=epochfs-gsrv
readonly CLIENT_NS=epochfs-gcli
readonly SERVER_IP=10.231.7.2
readonly CLIENT_IP=10.231.7.1
readonly VOLUME=epochfs-bench
readonly PIDFILE=/run/epochfs-glusterd.pid

die() {
  echo "gluster-source: $*" >&2
  exit 1
}

in_server() { ip netns exec "$SERVER_NS" "$@"; }

wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local tries=$(($1 * 10))
  shift
  until "$@" >/dev/null 2>&1; do
    tries=$((tries - 1))
    [[ $tries -gt 0 ]] || return 1
    sleep 0.1
  done
}

network_up() {
  local rate_mbit=$1
  ip netns add "$SERVER_NS"
  ip netns add "$CLIENT_NS"
  ip link add epochfs-gc type veth peer name epochfs-gs
  ip link set epochfs-gs netns "$SERVER_NS"
  ip link set epochfs-gc netns "$CLIENT_NS"
  ip -n "$SERVER_NS" addr add "$SERVER_IP/30" dev epochfs-gs
  ip -n "$CLIENT_NS" addr add "$CLIENT_IP/30" dev epochfs-gc
  for ns in "$SERVER_NS" "$CLIENT_NS"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$SERVER_NS" link set epochfs-gs up
  ip -n "$CLIENT_NS" link set epochfs-gc up
  if [[ $rate_mbit -gt 0 ]]; then
    # Burst: at least one jiffy's worth of bytes at the rate, or tbf cannot reach it.
    local burst=$((rate_mbit * 1000000 / 8 / 250 + 65536))
    ip netns exec "$SERVER_NS" tc qdisc add dev epochfs-gs root tbf rate "${rate_mbit}mbit" \
      burst "$burst" latency 50ms
    ip netns exec "$CLIENT_NS" tc qdisc add dev epochfs-gc root tbf rate "${rate_mbit}mbit" \
      burst "$burst" latency 50ms
  fi
}

up() {
  local brick=$1 mountpoint=$2 rate_mbit=$3
  command -v glusterd >/dev/null || die "glusterd not found (apt-get install glusterfs-server)"
  command -v mount.glusterfs >/dev/null ||
    die "mount.glusterfs not found (apt-get install glusterfs-client)"
  ! pgrep -x glusterd >/dev/null || die "a glusterd is already running on this machine"
  ! ip netns list | grep -qw "$SERVER_NS" || die "namespace $SERVER_NS exists: run down first"
  [[ -d $brick && -d $mountpoint ]] || die "$brick and $mountpoint must be directories"
  brick=$(realpath "$brick")

  network_up "$rate_mbit"
  in_server glusterd --pid-file="$PIDFILE"
  wait_for 30 in_server gluster --mode=script volume list || die "glusterd did not start"
  # force: the brick may sit on the root filesystem, which GlusterFS warns about.
  in_server gluster --mode=script volume create "$VOLUME" "$SERVER_IP:$brick" force >/dev/null
  in_server gluster --mode=script volume start "$VOLUME" >/dev/null
  # The client's glusterfs process is started inside the client namespace (nsenter enters
  # only the network namespace, so the mount is visible to the caller).
  wait_for 30 nsenter --net="/run/netns/$CLIENT_NS" \
    mount -t glusterfs "$SERVER_IP:/$VOLUME" "$mountpoint" ||
    die "the GlusterFS mount did not come up"
}

down() {
  local brick=$1 mountpoint=$2
  if grep -q " $(realpath -m "$mountpoint") fuse.glusterfs " /proc/mounts; then
    umount "$mountpoint" || umount -l "$mountpoint"
  fi
  if ip netns list | grep -qw "$SERVER_NS"; then
    in_server gluster --mode=script volume stop "$VOLUME" force >/dev/null 2>&1 || true
    in_server gluster --mode=script volume delete "$VOLUME" >/dev/null 2>&1 || true
  fi
  [[ -f $PIDFILE ]] && kill "$(cat "$PIDFILE")" 2>/dev/null || true
  rm -f "$PIDFILE"
  # The brick process and the client, if any survived.
  pkill -f "glusterfsd.*$VOLUME" 2>/dev/null || true
  pkill -f "glusterfs.*volfile-id=/?$VOLUME" 2>/dev/null || true
  for ns in "$SERVER_NS" "$CLIENT_NS"; do
    ip netns del "$ns" 2>/dev/null || true
  done
  if [[ -d $brick ]]; then
    rm -rf "$brick/.glusterfs"
    setfattr -x trusted.glusterfs.volume-id "$brick" 2>/dev/null || true
    setfattr -x trusted.gfid "$brick" 2>/dev/null || true
  fi
}

case "${1:-}" in
  up)
    [[ $# -eq 4 ]] || die "usage: $0 up BRICK MOUNTPOINT RATE_MBIT"
    trap 'down "$2" "$3"' EXIT  # a failed step undoes the ones before it
    up "$2" "$3" "$4"
    trap - EXIT
    ;;
  down)
    [[ $# -eq 3 ]] || die "usage: $0 down BRICK MOUNTPOINT"
    down "$2" "$3"
    ;;
  *) die "usage: $0 up BRICK MOUNTPOINT RATE_MBIT | down BRICK MOUNTPOINT" ;;
esac
