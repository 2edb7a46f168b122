"""The control directory's protocol, for the public functions of :mod:`epochfs`: the lines an
order is made of (names, paths, indices, ranges) and how a file of them is written into
``<mount>/.epochfs/`` and published (docs/user-guide.md, "The shuffle file")."""

import errno
import functools
import itertools
import json
import numbers
import operator
import os
import re
import sys
import tempfile

CONTROL = ".epochfs"
_CHUNK = 1 << 20  # bytes written per write() call, at least
# Lines joined at once: a loop over each line in Python cost ~0.2 us a line, 5 ms of a
# 25,000-sample order published as an epoch starts.
_BATCH = 4096
# The daemon's names (#job, #manifest, #stream): 1 to 64 of these characters.
NAME_MAX = 64
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]")


class PublishError(OSError):
    """The daemon refused an order or a manifest; the message says why."""


def read_stats(root):
    """The stats document of the mount at root, as a dict."""
    with open(os.path.join(root, CONTROL, "stats"), encoding="utf-8") as f:
        return json.load(f)


def sanitize_name(name):
    """``name`` made a valid job, manifest or stream name: each character outside
    ``A-Z a-z 0-9 . _ -`` replaced with ``_``, cut to 64 bytes."""
    return _NAME_BAD.sub("_", name)[:NAME_MAX]


def checked_name(what, name):
    # Checked here, not left to the daemon: it would skip a bad directive and file the order
    # under the default job, stream or manifest, and a line break would forge other headers.
    name = str(name)
    if not name or len(name) > NAME_MAX or _NAME_BAD.search(name):
        raise ValueError("a %s name is 1 to %d of A-Z a-z 0-9 . _ -, not %r"
                         % (what, NAME_MAX, name))
    return name


# The newest shuffle-file format this package writes (3: range orders); an order of paths or
# indices needs a daemon of format 2 (with #restart). The daemon says which it reads in its
# stats (``order_format``; absent before there was a choice: 1).
ORDER_FORMAT = 3
PLAIN_FORMAT = 2
# (mount root, the mount's st_dev) -> the format its daemon reads: asked once per mount.
_daemon_formats = {}


def check_format(root, version, needs=PLAIN_FORMAT):
    """Raises PublishError if the daemon at root cannot read format ``needs`` (this package,
    of ``version``, writes it)."""
    key = (root, os.stat(root).st_dev)
    if key not in _daemon_formats:
        _daemon_formats[key] = int(read_stats(root).get("order_format", 1))
    daemon = _daemon_formats[key]
    if daemon < needs:
        raise PublishError(
            errno.EPROTO,
            "the epochfs daemon of %s reads order format %d, this package (%s) writes %d: "
            "upgrade the daemon, or use the package that came with it" % (
                root, daemon, version, needs), root)


def write(root, name, header, lines, version, needs_format=PLAIN_FORMAT):
    """Writes one file into the control directory; fsync (or the close) publishes it."""
    check_format(root, version, needs_format)
    path = os.path.join(root, CONTROL, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        for text in _texts(itertools.chain(header, lines)):
            _write_all(fd, text)
    except OSError as e:  # a write over a limit of the daemon's: the close records why
        try:
            os.close(fd)
        except OSError:
            pass
        raise refused(root, e, path) from None
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
        raise refused(root, e, path) from None
    try:
        os.close(fd)
    except OSError as e:
        raise refused(root, e, path) from None


def _texts(lines):
    """The lines as text, _CHUNK bytes or more a piece but the last."""
    texts, size = [], 0
    while True:
        batch = list(itertools.islice(lines, _BATCH))
        if batch:
            texts.append("\n".join(batch) + "\n")
            size += len(texts[-1])
        if texts and (size >= _CHUNK or not batch):
            yield "".join(texts)
            texts, size = [], 0
        if not batch:
            return


def _write_all(fd, text):
    data = memoryview(text.encode("utf-8", "surrogateescape"))
    while data:
        data = data[os.write(fd, data):]


def refused(root, error, path):
    return PublishError(error.errno, last_message(root) or os.strerror(error.errno), path)


def last_message(root):
    try:
        return read_stats(root)["prefetch"]["last_publish"]["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return None

def is_index(item):
    # numpy's integer types register as numbers.Integral; bool is an int but not an index.
    return isinstance(item, numbers.Integral) and not isinstance(item, bool)


def index_line(item):
    if not is_index(item):
        raise ValueError("an order of indices holds a path: %r" % (item,))
    return str(operator.index(item))


def index_lines(items):
    """The lines of an order of indices. A plain int is written at once: the check against
    numbers.Integral costs a few microseconds an item, a second per million."""
    for item in items:
        yield str(item) if type(item) is int else index_line(item)


class _IntArray:
    """A 1-D numpy array of integers as plain ints, a slice at a time (its own items would
    each take the slow check; one list of them all would hold ~36 bytes an item)."""

    _SLICE = 65536

    def __init__(self, array):
        self._array = array

    def __len__(self):
        return len(self._array)

    def __iter__(self):
        for start in range(0, len(self._array), self._SLICE):
            yield from self._array[start:start + self._SLICE].tolist()


def plain_items(order):
    """order itself, or a 1-D numpy array of integers as plain ints."""
    numpy = sys.modules.get("numpy")  # never imported here: an order from numpy loaded it
    if numpy is not None and isinstance(order, numpy.ndarray) and \
            order.dtype.kind in ("i", "u") and order.ndim == 1:
        return _IntArray(order)
    return order


def counted(lines, source):
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


@functools.lru_cache(maxsize=8)
def _prefix(root):
    return os.path.join(os.path.abspath(root), "")


def relative(root, path):
    if type(path) is not str:
        if is_index(path):
            raise ValueError("an order of paths holds an index: %r" % (path,))
        # Names that are not UTF-8 arrive as surrogate escapes (os.listdir) or bytes; they
        # are written as the bytes they stand for, and the daemon skips such an entry, counted.
        path = os.fsdecode(os.fspath(path))
    if path.startswith("/"):
        # relpath costs ~5 us a path (6 s for an ImageNet manifest): a path already normal
        # under the root (no "//", no "." or ".." component, no trailing "/") is cut instead.
        prefix = _prefix(root)
        rest = path[len(prefix):]
        if path.startswith(prefix) and rest and "//" not in rest and \
                "/." not in "/" + rest and not rest.endswith("/"):
            path = rest
        else:
            path = os.path.relpath(path, root)
    if "\n" in path or "\r" in path:
        raise ValueError("a path in an order cannot hold a line break: %r" % path)
    return path


def range_lines(root, ranges):
    # A dataset file is named once per sample: its relative path is worked out once (relpath
    # was nine tenths of a publish's time), and looked up only when the path object changes
    # (most ranges repeat the one before's). Plain ints skip operator.index: together a quarter
    # less time a line.
    known = {}
    last, rel = object(), None  # no path is this object
    for item in ranges:
        path, offset, length = item
        if type(offset) is not int or type(length) is not int:
            offset, length = operator.index(offset), operator.index(length)
        if offset < 0 or length <= 0:
            raise ValueError("a range needs an offset >= 0 and a length > 0: %r" % (item,))
        if path is not last:
            rel = known.get(path) if isinstance(path, (str, bytes)) else None
            if rel is None:
                rel = relative(root, path)
                if isinstance(path, (str, bytes)):
                    known[path] = rel
            last = path
        yield f"{offset} {length} {rel}"
