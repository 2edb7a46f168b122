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
import json
import numbers
import operator
import os
import re
import tempfile
import warnings

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

_CONTROL = ".epochfs"
_counter = itertools.count()
_CHUNK = 1 << 20  # bytes written per write() call
_NOTHING = object()
# The daemon's names (#job, #manifest, #stream): 1 to 64 of these characters.
_NAME_MAX = 64
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]")


class PublishError(OSError):
    """The daemon refused an order or a manifest; the message says why."""


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
        if os.path.isfile(os.path.join(path, _CONTROL, "stats")):
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
    with open(os.path.join(_root(mount), _CONTROL, "stats"), encoding="utf-8") as f:
        return json.load(f)


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
    return _sanitize_name(job)


def _sanitize_name(name):
    """``name`` made a valid job, manifest or stream name: each character outside
    ``A-Z a-z 0-9 . _ -`` replaced with ``_``, cut to 64 bytes."""
    return _NAME_BAD.sub("_", name)[:_NAME_MAX]


def set_manifest(mount, paths, *, name=None, job=None):
    """Publishes a manifest: index ``i`` of an index-form order names ``paths[i]``.

    ``paths`` are relative to the mount's root (absolute paths inside the mount are made
    relative). The manifest is stored as ``name`` (``"default"`` if None) within ``job``
    (:func:`job_id` if None); an order publishes indices into it with the same ``manifest``
    and ``job``. Raises like :func:`publish`.
    """
    root = _root(mount)
    header = _header(job=job, manifest=name)
    lines, count = _counted((_relative(root, p) for p in paths), paths)
    _write(root, "manifest", header + ["#count %d" % count, "#line 1"], lines)


def set_range_manifest(mount, ranges, *, name=None, job=None):
    """Publishes a manifest of byte ranges: index ``i`` of an index-form order names sample
    ``i``, ``ranges[i]`` = ``(path, offset, length)`` (:mod:`epochfs.ranges` computes them).

    The compact form of :func:`publish_ranges` for large datasets: the ranges once, then each
    epoch's order as indices (:func:`publish` with ints). A sample is staged by the block its
    range starts in. ``name``, ``job`` and the errors are :func:`set_manifest`'s.
    """
    root = _root(mount)
    header = ["#form ranges"] + _header(job=job, manifest=name)
    lines, count = _counted(_range_lines(root, ranges), ranges)
    _write(root, "manifest", header + ["#count %d" % count, "#line 1"], lines,
           needs_format=ORDER_FORMAT)


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
    entries looked up name no file in the source. Raises :class:`PublishError` when the daemon refuses the order,
    another ``OSError`` when the mount is gone or cannot be written, ``ValueError`` for an
    order that mixes indices and paths, a path with a line break, or a name (stream, job,
    manifest) that is not 1 to 64 of ``A-Z a-z 0-9 . _ -``.
    """
    root = _root(mount)
    names = _header(job=job, manifest=manifest, stream=stream)
    items = iter(order)
    first = next(items, _NOTHING)
    items = itertools.chain([] if first is _NOTHING else [first], items)
    if _is_index(first):
        form, lines = "indices", (_index_line(i) for i in items)
    else:
        form, lines = "paths", (_relative(root, p) for p in items)
    lines, count = _counted(lines, order)
    header = ["#form " + form]
    if epoch is not None:
        header.append("#epoch %d" % int(epoch))
    if restart:
        header.append("#restart")
    header += names + ["#count %d" % count, "#line 1"]  # rejects count the order's items
    _write(root, "order-%d-%d" % (os.getpid(), next(_counter)), header, lines)
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
    lines, count = _counted(_range_lines(root, ranges), ranges)
    header = ["#form ranges"]
    if epoch is not None:
        header.append("#epoch %d" % int(epoch))
    if restart:
        header.append("#restart")
    header += names + ["#count %d" % count, "#line 1"]
    _write(root, "order-%d-%d" % (os.getpid(), next(_counter)), header, lines,
           needs_format=ORDER_FORMAT)
    return _verdict(root)


def _range_lines(root, ranges):
    # A dataset file is named once per sample: its relative path is worked out once (relpath
    # was nine tenths of a publish's time).
    relative = {}
    for item in ranges:
        path, offset, length = item
        offset, length = operator.index(offset), operator.index(length)
        if offset < 0 or length <= 0:
            raise ValueError("a range needs an offset >= 0 and a length > 0: %r" % (item,))
        rel = relative.get(path) if isinstance(path, (str, bytes)) else None
        if rel is None:
            rel = _relative(root, path)
            if isinstance(path, (str, bytes)):
                relative[path] = rel
        yield "%d %d %s" % (offset, length, rel)


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


def _is_index(item):
    # numpy's integer types register as numbers.Integral; bool is an int but not an index.
    return isinstance(item, numbers.Integral) and not isinstance(item, bool)


def _index_line(item):
    if not _is_index(item):
        raise ValueError("an order of indices holds a path: %r" % (item,))
    return str(operator.index(item))


def _counted(lines, source):
    """(lines, count): the count from len(source), else by spooling the lines to a file."""
    try:
        return lines, len(source)
    except TypeError:
        pass
    spool = tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogateescape")
    count = 0
    for line in lines:
        spool.write(line + "\n")
        count += 1
    spool.seek(0)
    return (line[:-1] for line in spool), count


def _relative(root, path):
    if _is_index(path):
        raise ValueError("an order of paths holds an index: %r" % (path,))
    # Names that are not UTF-8 arrive as surrogate escapes (os.listdir) or bytes; they are
    # written as the bytes they stand for, and the daemon skips such an entry, counted.
    path = os.fsdecode(os.fspath(path))
    if os.path.isabs(path):
        path = os.path.relpath(path, root)
    if "\n" in path or "\r" in path:
        raise ValueError("a path in an order cannot hold a line break: %r" % path)
    return path


def _header(job=None, manifest=None, stream=None):
    """The name directives: ``#stream`` and ``#manifest`` when given, ``#job`` always."""
    lines = []
    if stream is not None:
        lines.append("#stream " + _checked_name("stream", stream))
    lines.append("#job " + _checked_name("job", job_id() if job is None else job))
    if manifest is not None:
        lines.append("#manifest " + _checked_name("manifest", manifest))
    return lines


def _checked_name(what, name):
    # Checked here, not left to the daemon: it would skip a bad directive and file the order
    # under the default job, stream or manifest, and a line break would forge other headers.
    name = str(name)
    if not name or len(name) > _NAME_MAX or _NAME_BAD.search(name):
        raise ValueError("a %s name is 1 to %d of A-Z a-z 0-9 . _ -, not %r"
                         % (what, _NAME_MAX, name))
    return name


# The newest shuffle-file format this package writes (3: range orders); an order of paths or
# indices needs a daemon of format 2 (with #restart). The daemon says which it reads in its
# stats (``order_format``; absent before there was a choice: 1).
ORDER_FORMAT = 3
_PLAIN_FORMAT = 2
# (mount root, the mount's st_dev) -> the format its daemon reads: asked once per mount.
_daemon_formats = {}


def _check_format(root, needs=_PLAIN_FORMAT):
    """Raises PublishError if the daemon at root cannot read format ``needs``."""
    key = (root, os.stat(root).st_dev)
    if key not in _daemon_formats:
        _daemon_formats[key] = int(stats(root).get("order_format", 1))
    daemon = _daemon_formats[key]
    if daemon < needs:
        raise PublishError(
            errno.EPROTO,
            "the epochfs daemon of %s reads order format %d, this package (%s) writes %d: "
            "upgrade the daemon, or use the package that came with it" % (
                root, daemon, __version__, needs), root)


def _write(root, name, header, lines, needs_format=_PLAIN_FORMAT):
    """Writes one file into the control directory; fsync (or the close) publishes it."""
    _check_format(root, needs_format)
    path = os.path.join(root, _CONTROL, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        piece, size = [], 0
        for line in itertools.chain(header, lines):
            piece.append(line)
            size += len(line) + 1
            if size >= _CHUNK:
                _write_all(fd, piece)
                piece, size = [], 0
        _write_all(fd, piece)
    except OSError as e:  # a write over a limit of the daemon's: the close records why
        try:
            os.close(fd)
        except OSError:
            pass
        raise _refused(root, e, path) from None
    except BaseException:
        try:
            os.close(fd)  # the daemon refuses what was written: empty, or short of its #count
        except OSError:
            pass
        raise
    # fsync publishes and reports a refusal; the close would too, but with
    # --data-path no-open a close does not reach the daemon.
    try:
        os.fsync(fd)
    except OSError as e:
        try:
            os.close(fd)
        except OSError:
            pass  # the close repeats the refusal
        raise _refused(root, e, path) from None
    try:
        os.close(fd)
    except OSError as e:
        raise _refused(root, e, path) from None


def _write_all(fd, lines):
    if not lines:
        return
    data = memoryview(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    while data:
        data = data[os.write(fd, data):]


def _refused(root, error, path):
    return PublishError(error.errno, _last_message(root) or os.strerror(error.errno), path)


def _last_message(root):
    try:
        return stats(root)["prefetch"]["last_publish"]["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
