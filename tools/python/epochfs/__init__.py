"""Publish training orders to an epochfs mount.

epochfs stages the files a trainer will open next when it knows the order: this module
writes that order into the mount's control directory (``<mount>/.epochfs/``), in the format
of docs/user-guide.md ("The shuffle file"). Standard library only; the PyTorch samplers are
in :mod:`epochfs.torch`.

Every order is written with a ``#count`` header: the daemon publishes it when the file is
closed, and refuses it whole if fewer lines arrived (a writer killed mid-file never publishes
a truncated order). Orders are streamed: a sequence of any length, or a generator (spooled to
a temporary file to count it first), is written in pieces of about 1 MiB.

A mount is shared by the jobs of a node, so every order and manifest also carries a ``#job``
header: streams and manifests belong to a (user, job), two jobs may both have a stream
``rank0``, and a job's streams are dropped when its last publishing process exits. The job is
:func:`job_id` unless given: ``EPOCHFS_JOB``, else torchrun's ``TORCHELASTIC_RUN_ID``, else
Slurm's ``SLURM_JOB_ID[.SLURM_STEP_ID]``, else ``pid<pid>`` (this process alone). Within a
job, manifests have names (``#manifest``, ``default`` if not given), and an index-form order
names the manifest its indices refer to. Daemons older than these headers read them as
comments.

:func:`publish` and :func:`set_manifest` raise when the daemon refuses (:class:`PublishError`,
with its reason) or the mount cannot be written; the samplers of :mod:`epochfs.torch` turn
that into one warning instead.
"""

import collections
import errno
import itertools
import os
import warnings

from epochfs import _control
from epochfs._control import PublishError

# The package's version, pyproject.toml's too; configuring the build fails unless it is the
# project's (CMakeLists.txt).
__version__ = "0.2.0"

__all__ = [
    "PublishError",
    "Published",
    "find_mount",
    "is_epochfs",
    "job_id",
    "publish",
    "publish_ranges",
    "set_manifest",
    "set_range_manifest",
    "stats",
]

PublishError.__module__ = __name__  # raised to users as epochfs.PublishError

_counter = itertools.count()
_NOTHING = object()
# The shuffle-file format this package writes (3: range orders).
ORDER_FORMAT = _control.ORDER_FORMAT


class Published(collections.namedtuple(
        "Published", "message stream epoch accepted rejected looked_up found mostly_missing")):
    """What :func:`publish` published: the daemon's verdict (docs/stats.md,
    ``prefetch.last_publish``). ``looked_up`` of the order's entries (up to 16, spread over it)
    were looked up in the source as it was published, and ``found`` of them name a file the
    publisher can read; ``mostly_missing`` says fewer than half did, so the paths are likely
    relative to another directory than the mount's root."""

    __slots__ = ()

    @classmethod
    def of(cls, report):
        defaults = {"message": "", "mostly_missing": False}
        return cls(*(report.get(f, defaults.get(f, 0)) for f in cls._fields))


def find_mount(path):
    """The root of the epochfs mount holding ``path`` (a file or directory), or None.

    A training script's data dir is often a subdirectory of the mount (``mount/train``); the
    control directory exists only at the mount's root.
    """
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        path = os.path.dirname(path)
    while True:
        if os.path.isfile(os.path.join(path, _control.CONTROL, "stats")):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def is_epochfs(path):
    """True if ``path`` is inside an epochfs mount."""
    return find_mount(path) is not None


def stats(mount):
    """The mount's statistics (``<mount>/.epochfs/stats``, docs/stats.md) as a dict."""
    return _control.read_stats(_root(mount))


def job_id():
    """The job this process publishes under, as the ``#job`` header names it.

    The first that is set and not empty: ``EPOCHFS_JOB``; ``TORCHELASTIC_RUN_ID`` (torchrun;
    its ``"none"`` is skipped); ``SLURM_JOB_ID``, with ``"." + SLURM_STEP_ID`` when that is
    set; otherwise ``"pid"`` and this process's id. Characters other than ``A-Z a-z 0-9 . _ -``
    become ``_`` and the name is cut to 64 bytes. All ranks of one torchrun or Slurm step get
    the same job; without either, each process is a job of its own.
    """
    job = os.environ.get("EPOCHFS_JOB")
    if not job:
        run = os.environ.get("TORCHELASTIC_RUN_ID")
        if run and run != "none":
            job = run
        elif os.environ.get("SLURM_JOB_ID"):
            job = os.environ["SLURM_JOB_ID"]
            if os.environ.get("SLURM_STEP_ID"):
                job += "." + os.environ["SLURM_STEP_ID"]
        else:
            job = "pid%d" % os.getpid()
    return _control.sanitize_name(job)


def set_manifest(mount, paths, *, name=None, job=None):
    """Publishes a manifest: index ``i`` of an index-form order names ``paths[i]``.

    ``paths`` are relative to the mount's root (absolute paths inside the mount are made
    relative). The manifest is stored as ``name`` (``"default"`` if None) within ``job``
    (:func:`job_id` if None); an order publishes indices into it with the same ``manifest``
    and ``job``. Raises like :func:`publish`.
    """
    root = _root(mount)
    header = _header(job=job, manifest=name)
    lines, count = _control.counted((_control.relative(root, p) for p in paths), paths)
    _control.write(root, "manifest", header + ["#count %d" % count, "#line 1"], lines,
                   __version__)


def set_range_manifest(mount, ranges, *, name=None, job=None):
    """Publishes a manifest of byte ranges: index ``i`` of an index-form order names sample
    ``i``, ``ranges[i]`` = ``(path, offset, length)`` (:mod:`epochfs.ranges` computes them).

    The compact form of :func:`publish_ranges` for large datasets: the ranges once, then each
    epoch's order as indices (:func:`publish` with ints). A sample is staged by the block its
    range starts in. ``name``, ``job`` and the errors are :func:`set_manifest`'s.
    """
    root = _root(mount)
    header = ["#form ranges"] + _header(job=job, manifest=name)
    lines, count = _control.counted(_control.range_lines(root, ranges), ranges)
    _control.write(root, "manifest", header + ["#count %d" % count, "#line 1"], lines,
                   __version__, needs_format=ORDER_FORMAT)


def publish(mount, order, *, epoch=None, stream=None, job=None, manifest=None, restart=False):
    """Publishes one epoch's order.

    ``order`` is an iterable of paths (``str``, ``bytes`` or path-like; relative to the
    mount's root, or absolute inside it) or of integer indices into a manifest
    (:func:`set_manifest`; ``int`` or numpy integers), in the order the trainer will read
    them. Its first item decides which. ``epoch`` defaults to one past the stream's newest
    (an epoch older than the stream's current one restarts the stream); ``stream`` names the
    reader (one per rank), ``"default"`` if None; ``job`` is the job the stream belongs to,
    :func:`job_id` if None; ``manifest`` names the job's manifest that indices refer to,
    ``"default"`` if None; ``restart`` drops every epoch of the stream queued before this one
    (``#restart``: an epoch published ahead that the trainer will not read, as before a resume
    from a checkpoint). Returns a :class:`Published`, and warns (``UserWarning``) when most
    entries looked up name no file in the source. Raises :class:`PublishError` when the
    daemon refuses the order, another ``OSError`` when the mount is gone or cannot be written,
    ``ValueError`` for an order that mixes indices and paths, a path with a line break, or a
    name (stream, job, manifest) that is not 1 to 64 of ``A-Z a-z 0-9 . _ -``.
    """
    root = _root(mount)
    names = _header(job=job, manifest=manifest, stream=stream)
    order = _control.plain_items(order)
    items = iter(order)
    first = next(items, _NOTHING)
    items = itertools.chain([] if first is _NOTHING else [first], items)
    if _control.is_index(first):
        form, lines = "indices", _control.index_lines(items)
    else:
        form, lines = "paths", (_control.relative(root, p) for p in items)
    lines, count = _control.counted(lines, order)
    header = ["#form " + form]
    if epoch is not None:
        header.append("#epoch %d" % int(epoch))
    if restart:
        header.append("#restart")
    header += names + ["#count %d" % count, "#line 1"]  # rejects count the order's items
    _control.write(root, "order-%d-%d" % (os.getpid(), next(_counter)), header, lines,
                   __version__)
    return _verdict(root)


def publish_ranges(mount, ranges, *, epoch=None, stream=None, job=None, restart=False):
    """Publishes one epoch's order of byte ranges: for a dataset that is one large file (or a
    few) read by sample at random offsets, as LMDB, HDF5, ``.npy`` and TFRecord are.

    ``ranges`` is an iterable of ``(path, offset, length)``, one per sample, in the order the
    trainer will read them; :mod:`epochfs.ranges` computes them from the dataset itself. The
    daemon stages those files by blocks in that order (docs/semantics.md, "Range orders").
    The other arguments, the return value and the errors are :func:`publish`'s.
    """
    root = _root(mount)
    names = _header(job=job, manifest=None, stream=stream)
    lines, count = _control.counted(_control.range_lines(root, ranges), ranges)
    header = ["#form ranges"]
    if epoch is not None:
        header.append("#epoch %d" % int(epoch))
    if restart:
        header.append("#restart")
    header += names + ["#count %d" % count, "#line 1"]
    _control.write(root, "order-%d-%d" % (os.getpid(), next(_counter)), header, lines,
                   __version__, needs_format=ORDER_FORMAT)
    return _verdict(root)


def _header(job=None, manifest=None, stream=None):
    """The name directives: ``#stream`` and ``#manifest`` when given, ``#job`` always."""
    lines = []
    if stream is not None:
        lines.append("#stream " + _control.checked_name("stream", stream))
    lines.append("#job " + _control.checked_name("job", job_id() if job is None else job))
    if manifest is not None:
        lines.append("#manifest " + _control.checked_name("manifest", manifest))
    return lines


def _verdict(root):
    """The daemon's verdict on this user's latest order, warning when it matched little."""
    try:
        published = Published.of(stats(root)["prefetch"]["last_publish"] or {})
    except (OSError, ValueError, KeyError, TypeError):
        return None  # published; only the report could not be read
    if published.mostly_missing:
        warnings.warn("epochfs: %d of the %d entries looked up name a file you can read in the "
                      "mount's source: paths are relative to the mount's root (%s), or absolute "
                      "inside it" % (published.found, published.looked_up, root), stacklevel=3)
    return published


def _root(mount):
    root = find_mount(mount)
    if root is None:
        raise FileNotFoundError(errno.ENOENT, "not an epochfs mount", mount)
    return root


