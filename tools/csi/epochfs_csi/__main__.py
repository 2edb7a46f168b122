"""``epochfs-csi``: the Kubernetes CSI node plugin (tools/deploy/csi-driver.yaml runs it)."""

import argparse
import concurrent.futures
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading

import grpc

from epochfs_csi import node, service, volumes


def parser():
    p = argparse.ArgumentParser(
        prog="epochfs-csi",
        description="CSI node plugin: mounts epochfs for each pod's volume (see the user guide's "
                    "Kubernetes section).")
    p.add_argument("--endpoint", default="unix:///csi/csi.sock",
                   help="where kubelet's registrar finds the plugin (unix:///path)")
    p.add_argument("--node-id", default=os.environ.get("NODE_NAME") or socket.gethostname(),
                   help="this node's name (default: $NODE_NAME, else the host name)")
    p.add_argument("--source-root", required=True,
                   help="the directory the datasets lie under; a volume's source is relative "
                        "to it and cannot leave it")
    p.add_argument("--cache-root", default="/var/cache/epochfs",
                   help="the local directory for the volumes' caches (each its own subdirectory)")
    p.add_argument("--max-cache-size", type=_size,
                   help="the largest cacheSize a volume may ask for, and a volume's size when it "
                        "names none (default: each takes what the cache disk's reserve allows)")
    p.add_argument("--max-volumes", type=int, default=16,
                   help="volumes mounted at once on this node (each is an epochfs daemon)")
    p.add_argument("--mount-arg", action="append", default=[], dest="mount_args",
                   help="an option for every volume's epochfs mount, e.g. --mount-arg=--max-memory=2G")
    p.add_argument("--epochfs", default=shutil.which("epochfs") or "/usr/bin/epochfs",
                   help="the epochfs binary")
    return p


def _size(text):
    size = volumes.parse_size(text)
    if not size:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 300G)")
    return size


def _version(epochfs):
    out = subprocess.run([epochfs, "--version"], capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL)
    return out.stdout.split()[-1]


def _socket_path(endpoint):
    path = endpoint.removeprefix("unix://")
    if not path.startswith("/"):
        raise SystemExit(f"epochfs-csi: --endpoint {endpoint}: give unix:///an/absolute/path")
    return path


def main(argv=None):
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s epochfs-csi %(levelname)s %(message)s")
    if not os.path.isdir(args.source_root):
        raise SystemExit(f"epochfs-csi: --source-root {args.source_root} is not a directory")
    try:
        version = _version(args.epochfs)
    except (OSError, subprocess.CalledProcessError) as error:
        raise SystemExit(f"epochfs-csi: cannot run {args.epochfs}: {error}") from None
    settings = node.Settings(
        epochfs=args.epochfs, node_id=args.node_id, cache_root=args.cache_root,
        limits=volumes.Limits(args.source_root, args.max_cache_size),
        max_volumes=args.max_volumes, mount_args=tuple(args.mount_args))
    node_service = node.Node(settings)
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers(
        service.handlers(service.Identity(version, args.epochfs), node_service))
    path = _socket_path(args.endpoint)
    if os.path.exists(path):
        os.unlink(path)  # left by a plugin that ended without cleaning up
    server.add_insecure_port("unix://" + path)
    server.start()
    logging.info("serving %s %s on %s for node %s", service.NAME, version, path, args.node_id)
    _wait_for_signal()
    server.stop(grace=5).wait()
    node_service.stop_all()
    logging.info("stopped; every volume unmounted")


def _wait_for_signal():
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
