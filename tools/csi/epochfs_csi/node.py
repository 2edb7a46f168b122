"""The CSI Node service: NodePublishVolume mounts epochfs for one pod's volume at the target
kubelet names, NodeUnpublishVolume unmounts it (which deletes that volume's cache).

Calls are idempotent as CSI asks (kubelet retries): publishing a volume already mounted at its
target with the same source succeeds (a mount whose daemon died is made again), and
unpublishing a target that is not mounted succeeds.
At most ``max_volumes`` volumes are mounted at once (each is a daemon with its own cache)."""

import contextlib
import dataclasses
import os
import threading

import grpc

from epochfs_csi import csi_pb2, mounts, volumes
from epochfs_csi.volumes import Refused


@dataclasses.dataclass(frozen=True)
class Settings:
    epochfs: str  # the epochfs binary
    node_id: str
    cache_root: str
    limits: volumes.Limits
    max_volumes: int
    mount_args: tuple = ()  # the operator's options for every volume's mount
    timeout_s: float = 60.0


class Node:
    def __init__(self, settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._daemons = {}  # target -> mounts.Daemon (None while its mount is being made)
        self._busy = set()  # targets with a call in progress

    def get_info(self, request, context):
        return csi_pb2.NodeGetInfoResponse(node_id=self.settings.node_id,
                                           max_volumes_per_node=self.settings.max_volumes)

    def get_capabilities(self, request, context):
        # No STAGE_UNSTAGE_VOLUME: each pod's volume is a mount of its own, made at publish.
        return csi_pb2.NodeGetCapabilitiesResponse()

    def publish(self, request, context):
        volume = volumes.checked(request, self.settings.limits)
        with self._claimed(volume.target):
            mounted = mounts.epochfs_mounts().get(volume.target)
            # A mount whose daemon died (the plugin's container was replaced) is made again:
            # epochfs mount detaches the dead one.
            if mounted is not None and not mounts.is_dead(volume.target):
                if mounted != volume.source:
                    raise Refused(grpc.StatusCode.ALREADY_EXISTS,
                                  f"{volume.target} is a mount of {mounted}, not of "
                                  f"{volume.source}")
                return csi_pb2.NodePublishVolumeResponse()
            self._forget_dead(volume.target)
            self._reserve(volume.target)
            try:
                self._mount(volume)
            except BaseException:
                with self._lock:
                    self._daemons.pop(volume.target, None)
                raise
        return csi_pb2.NodePublishVolumeResponse()

    def unpublish(self, request, context):
        if not request.volume_id or not request.target_path:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "volume_id and target_path are needed")
        target = request.target_path
        with self._claimed(target):
            with self._lock:
                daemon = self._daemons.pop(target, None)
            error = None
            if target in mounts.epochfs_mounts():
                error = mounts.unmount(self.settings.epochfs, target, self.settings.timeout_s)
            if error is not None:
                if daemon is not None:
                    daemon.stop(self.settings.timeout_s)
                raise Refused(grpc.StatusCode.INTERNAL, f"unmounting {target}: {error}")
            # Unmounted: the daemon deletes its cache and exits by itself (mounts.Daemon).
            mounts.remove_target(target)
        return csi_pb2.NodeUnpublishVolumeResponse()

    def stop_all(self):
        """Every daemon stopped (each unmounts and deletes its cache): the plugin is ending."""
        with self._lock:
            daemons = [d for d in self._daemons.values() if d is not None]
            self._daemons.clear()
        for daemon in daemons:  # all at once: each may take a while deleting its cache
            daemon.terminate()
        for daemon in daemons:
            daemon.stop(self.settings.timeout_s)

    def _forget_dead(self, target):
        with self._lock:
            daemon = self._daemons.pop(target, None)
        if daemon is not None:
            daemon.stop(self.settings.timeout_s)  # reaped: it died

    def _reserve(self, target):
        with self._lock:
            if len(self._daemons) >= self.settings.max_volumes:
                raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"this node mounts at most {self.settings.max_volumes} epochfs "
                              f"volumes; unpublish one first")
            self._daemons[target] = None

    def _mount(self, volume):
        try:
            os.makedirs(volume.target)
        except FileExistsError:
            pass  # made by an earlier call, or a dead mount there (epochfs mount detaches it)
        daemon = mounts.Daemon(self._argv(volume), name=volume.volume_id)
        if not daemon.wait_mounted(volume.target, self.settings.timeout_s):
            mounts.remove_target(volume.target)
            raise Refused(grpc.StatusCode.INTERNAL,
                          f"epochfs mount {volume.source}: {daemon.last_words()}")
        with self._lock:
            self._daemons[volume.target] = daemon

    def _argv(self, volume):
        argv = [self.settings.epochfs, "mount", "--foreground", "--allow-other",
                f"--cache-dir={self.settings.cache_root}", *self.settings.mount_args]
        if volume.cache_size is not None:
            argv.append(f"--cache-size={volume.cache_size}")
        if volume.readonly:
            argv += ["-o", "ro"]
        return argv + ["--", volume.source, volume.target]

    @contextlib.contextmanager
    def _claimed(self, target):
        """One call at a time per target: kubelet may retry a publish while the first still
        runs."""
        with self._lock:
            if target in self._busy:
                raise Refused(grpc.StatusCode.ABORTED,
                              f"a call for {target} is in progress; try again")
            self._busy.add(target)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(target)
