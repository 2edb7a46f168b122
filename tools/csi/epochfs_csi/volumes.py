"""What a NodePublishVolume asks for, checked before anything is mounted.

A volume's attributes are written by whoever wrote the pod (an inline ephemeral volume) or the
PersistentVolume: on a shared cluster, any namespace's user. So a source must lie under the
operator's ``--source-root`` (no ``..``, no symbolic link out of it), a cache size within
``--max-cache-size``, and no other key is accepted: a misspelt key is an error, not a setting
silently ignored."""

import dataclasses
import os
import re

import grpc

# Keys kubelet adds to an inline volume's attributes (and to a PV's with podInfoOnMount).
KUBELET_PREFIX = "csi.storage.k8s.io/"
KEYS = ("source", "cacheSize")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Refused(Exception):
    """A request the plugin does not carry out: the gRPC code and the message for kubelet (which
    shows it in the pod's events)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class Limits:
    """The operator's bounds on what a volume may ask for."""

    source_root: str
    max_cache_size: int | None = None  # bytes; None: what the cache disk's reserve allows


@dataclasses.dataclass(frozen=True)
class Volume:
    volume_id: str
    target: str
    source: str  # resolved, under the source root
    cache_size: int | None
    readonly: bool


def parse_size(text):
    """Bytes from ``300G``, ``300Gi``, ``1.5T`` or ``4096`` (units are binary, as epochfs's own),
    or None if the text is not a size."""
    match = _SIZE.match(text)
    if not match:
        return None
    return int(float(match.group(1)) * _SCALE[match.group(2).upper()])


def checked(request, limits):
    """The Volume a NodePublishVolumeRequest asks for, or Refused saying what is wrong."""
    if not request.volume_id:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is empty")
    target = request.target_path
    if not target or not os.path.isabs(target) or "\0" in target:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"target_path must be an absolute path, not {target!r}")
    _check_capability(request)
    context = dict(request.volume_context)
    unknown = sorted(k for k in context if k not in KEYS and not k.startswith(KUBELET_PREFIX))
    if unknown:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"unknown volume attribute {', '.join(unknown)}: "
                      f"epochfs volumes take {' and '.join(KEYS)}")
    return Volume(volume_id=request.volume_id, target=target,
                  source=_source(context.get("source", ""), limits.source_root),
                  cache_size=_cache_size(context.get("cacheSize"), limits.max_cache_size),
                  readonly=request.readonly)


def _check_capability(request):
    if not request.HasField("volume_capability"):
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "volume_capability is missing")
    capability = request.volume_capability
    if not capability.HasField("mount"):
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      "epochfs volumes are directories: use volumeMode Filesystem, not Block")
    if capability.mount.mount_flags:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"mount options {list(capability.mount.mount_flags)} are not taken: "
                      f"epochfs volumes take the attributes {' and '.join(KEYS)}")
    if capability.mount.fs_type not in ("", "epochfs", "fuse.epochfs"):
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"fsType {capability.mount.fs_type!r}: epochfs volumes are fuse.epochfs")


def _source(text, root):
    """The real directory a volume's ``source`` names, relative to the source root (an absolute
    path must lie under it as well)."""
    if not text:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"the volume attribute source is missing: name a directory under {root}")
    root = os.path.realpath(root)
    wanted = text if os.path.isabs(text) else os.path.join(root, text)
    real = os.path.realpath(wanted)
    if os.path.commonpath([real, root]) != root:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"source {text!r} is outside the source root {root}, where this node's "
                      f"datasets are")
    if not os.path.isdir(real):
        raise Refused(grpc.StatusCode.NOT_FOUND,
                      f"source {text!r}: no directory {real} on this node")
    return real


def _cache_size(text, most):
    if text is None:
        return most
    size = parse_size(text)
    if size is None or size == 0:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT,
                      f"cacheSize {text!r} is not a size (e.g. 300Gi, 300G, 1.5T)")
    if most is not None and size > most:
        raise Refused(grpc.StatusCode.OUT_OF_RANGE,
                      f"cacheSize {text} is more than this node allows a volume "
                      f"({most >> 20} MiB)")
    return size
