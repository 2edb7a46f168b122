"""Publish training orders to an epochfs mount.

epochfs stages the files a trainer will open next when it knows the order: this module
writes that order into the mount's control directory (``<mount>/.epochfs/``), in the format
of docs/user-guide.md ("The shuffle file"). Standard library only; the PyTorch samplers are
in :mod:`epochfs.torch`.

Every order is written with a ``#count`` header: the daemon publishes it when the file is
closed, and refuses it whole if fewer lines arrived (a writer killed mid-file never publishes
a truncated order). Orders are streamed: a sequence of any length, or a generator (spooled to
a temporary file to count it first), is written in pieces of about 1 MiB.
"""

import errno
import itertools
import json
import numbers
import operator
import os
import tempfile

__version__ = "0.2.0"  # tools/python/pyproject.toml's version; a test checks they match

__all__ = [
    "PublishError",
    "find_mount",
    "is_epochfs",
    "publish",
    "set_manifest",
    "stats",
]

_CONTROL = ".epochfs"
_counter = itertools.count()
_CHUNK = 1 << 20  # bytes written per write() call
_NOTHING = object()


class PublishError(OSError):
    """The daemon refused an order or a manifest; the message says why."""


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


def set_manifest(mount, paths):
    """Publishes the manifest: index ``i`` of an index-form order names ``paths[i]``.

    ``paths`` are relative to the mount's root (absolute paths inside the mount are made
    relative).
    """
    root = _root(mount)
    lines, count = _counted((_relative(root, p) for p in paths), paths)
    _write(root, "manifest", _header(count=count), lines)


def publish(mount, order, *, epoch=None, stream=None):
    """Publishes one epoch's order.

    ``order`` is an iterable of paths (``str``, ``bytes`` or path-like; relative to the
    mount's root, or absolute inside it) or of integer indices into the manifest
    (:func:`set_manifest`; ``int`` or numpy integers), in the order the trainer will read
    them. Its first item decides which. ``epoch`` defaults to one past the stream's newest;
    ``stream`` names the reader (one per rank), ``"default"`` if None. Raises
    :class:`PublishError` when the daemon refuses the order, ``ValueError`` for an order that
    mixes indices and paths or a path with a line break.
    """
    root = _root(mount)
    items = iter(order)
    first = next(items, _NOTHING)
    items = itertools.chain([] if first is _NOTHING else [first], items)
    if _is_index(first):
        form, lines = "indices", (_index_line(i) for i in items)
    else:
        form, lines = "paths", (_relative(root, p) for p in items)
    lines, count = _counted(lines, order)
    header = _header(form=form, epoch=epoch, stream=stream, count=count)
    _write(root, "order-%d-%d" % (os.getpid(), next(_counter)), header, lines)


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


def _header(form=None, epoch=None, stream=None, count=None):
    lines = []
    if form is not None:
        lines.append("#form " + form)
    if epoch is not None:
        lines.append("#epoch %d" % int(epoch))
    if stream is not None:
        lines.append("#stream " + str(stream))
    if count is not None:
        lines.append("#count %d" % count)
    return lines


def _write(root, name, header, lines):
    """Writes one file into the control directory; fsync (or the close) publishes it."""
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
