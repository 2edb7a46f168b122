"""docs/reliability.md M2: a differential state machine of a mount against its own source.

Hypothesis drives random steps: changes made to the source behind the mount's back (write in
place, replace by rename, truncate, delete, rename files and directories, mkdir, rmdir), and
reads, stats, listings and whole-tree walks through the mount, with orders published now and
then so that prefetch copies files into a cache far smaller than the data (copies are made,
evicted and found stale). The oracle is the source directory itself: after every step the
mount must show what the source shows.

The mount runs with --attr-timeout 0 and --negative-timeout 0, which makes the documented
consistency window (docs/semantics.md, "When the source changes while mounted") zero, and every
write gets a distinct mtime, so a same-size rewrite within the timestamp granularity (the one
documented blind spot) cannot happen. Any divergence is a bug.

EPOCHFS_MODEL_EXAMPLES and EPOCHFS_MODEL_STEPS raise the run's size (defaults: the CI size).
"""

import errno
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, rule,
                                 run_state_machine_as_test)

BINARY = os.environ.get("EPOCHFS_BINARY", "epochfs")
EXAMPLES = int(os.environ.get("EPOCHFS_MODEL_EXAMPLES", "100"))
STEPS = int(os.environ.get("EPOCHFS_MODEL_STEPS", "50"))

DIRS = ["", "d", "d/e", "f"]
NAMES = ["a", "b", "c"]
PATHS = [os.path.join(d, n) for d in DIRS for n in NAMES] + DIRS[1:]
# Sizes at the edges that matter: empty, a page, FUSE's 128 KiB request, the copy chunk.
SIZES = st.sampled_from([0, 1, 4095, 4096, 4097, 131071, 131072, 131073, 262144, 300001])


def outcome(fn):
    """What fn returned, or the errno it raised: the mount and the source must agree on it."""
    try:
        return fn()
    except OSError as e:
        return ("errno", errno.errorcode.get(e.errno, e.errno))


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def attrs(path):
    s = os.lstat(path)
    return (s.st_mode, s.st_size, s.st_mtime_ns, s.st_nlink if not os.path.isdir(path) else 0)


def tree(root):
    """Every entry under root with its type, size and content: the whole visible state."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(d, root)
        out[rel] = ("dir", sorted(dirs + files))
        for n in files:
            p = os.path.join(d, n)
            out[os.path.join(rel, n)] = ("file", os.path.getsize(p), read_all(p))
    return out


class Session:
    """One mount for the whole module; each example works in its own source subdirectory."""

    def __init__(self, data_path):
        self.work = tempfile.mkdtemp(prefix="epochfs-model-")
        self.source = os.path.join(self.work, "src")
        self.mnt = os.path.join(self.work, "mnt")
        os.makedirs(self.source)
        os.makedirs(self.mnt)
        subprocess.run([BINARY, "mount", self.source, self.mnt, "--cache-dir",
                        os.path.join(self.work, "cache"), "--cache-size", "1M",
                        "--attr-timeout", "0", "--negative-timeout", "0", "--data-path",
                        data_path, "--log-level", "warning"],
                       check=True, stdin=subprocess.DEVNULL)
        self.runs = 0
        self.checks = 0  # after the start and after every step
        self.mtime = 1_000_000_000 * 10**9

    def next_mtime(self):
        self.mtime += 1_000_003
        return self.mtime

    def stats(self):
        with open(os.path.join(self.mnt, ".epochfs", "stats")) as f:
            return json.load(f)

    def close(self):
        if subprocess.run([BINARY, "unmount", self.mnt], stdin=subprocess.DEVNULL).returncode:
            subprocess.run(["umount", "-l", self.mnt])
        shutil.rmtree(self.work, ignore_errors=True)


class MountModel(RuleBasedStateMachine):
    session = None  # set by the test before it runs the machine

    @invariant()
    def cache_within_cap(self):
        MountModel.session.checks += 1
        cache_within_cap(MountModel.session)

    @initialize()
    def start(self):
        s = MountModel.session
        s.runs += 1
        self.rel = "run%d" % s.runs
        self.src = os.path.join(s.source, self.rel)
        self.mnt = os.path.join(s.mnt, self.rel)
        os.makedirs(self.src)
        self.content = 0

    def data(self, size):
        # Every byte says which write made it, so a stale or mixed read shows where it came from.
        self.content += 1
        block = ("w%06d " % self.content).encode()
        return (block * (size // len(block) + 1))[:size]

    def stamp(self, path):
        t = MountModel.session.next_mtime()
        os.utime(path, ns=(t, t), follow_symlinks=False)

    # Changes to the source, behind the mount's back. One that the source refuses (a missing
    # parent, a non-empty directory) changes nothing, as on the source itself.

    @rule(path=st.sampled_from(PATHS), size=SIZES)
    def write_in_place(self, path, size):
        p = os.path.join(self.src, path)
        try:
            with open(p, "wb") as f:
                f.write(self.data(size))
            self.stamp(p)
        except OSError:
            pass

    @rule(path=st.sampled_from(PATHS), size=SIZES)
    def replace_by_rename(self, path, size):
        p = os.path.join(self.src, path)
        tmp = os.path.join(self.src, ".tmp")
        with open(tmp, "wb") as f:
            f.write(self.data(size))
        self.stamp(tmp)
        try:
            os.rename(tmp, p)
        except OSError:
            os.unlink(tmp)

    @rule(path=st.sampled_from(PATHS), size=SIZES)
    def truncate(self, path, size):
        p = os.path.join(self.src, path)
        try:
            os.truncate(p, size)
            self.stamp(p)
        except OSError:
            pass

    @rule(path=st.sampled_from(PATHS))
    def delete(self, path):
        p = os.path.join(self.src, path)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
        except OSError:
            pass

    @rule(a=st.sampled_from(PATHS), b=st.sampled_from(PATHS))
    def rename(self, a, b):
        try:
            os.rename(os.path.join(self.src, a), os.path.join(self.src, b))
        except OSError:
            pass

    @rule(path=st.sampled_from(DIRS[1:] + PATHS))
    def mkdir(self, path):
        try:
            os.mkdir(os.path.join(self.src, path))
        except OSError:
            pass

    # Through the mount: each must agree with the source.

    @rule(path=st.sampled_from(PATHS))
    def read(self, path):
        mine = outcome(lambda: read_all(os.path.join(self.mnt, path)))
        theirs = outcome(lambda: read_all(os.path.join(self.src, path)))
        assert mine == theirs, "%s: mount %r, source %r" % (path, mine[:40], theirs[:40])

    @rule(path=st.sampled_from(PATHS), offset=SIZES, length=SIZES)
    def pread(self, path, offset, length):
        def at(root):
            fd = os.open(os.path.join(root, path), os.O_RDONLY)
            try:
                return os.pread(fd, length, offset)
            finally:
                os.close(fd)
        assert outcome(lambda: at(self.mnt)) == outcome(lambda: at(self.src)), path

    @rule(path=st.sampled_from(PATHS))
    def stat(self, path):
        mine = outcome(lambda: attrs(os.path.join(self.mnt, path)))
        theirs = outcome(lambda: attrs(os.path.join(self.src, path)))
        assert mine == theirs, "%s: mount %r, source %r" % (path, mine, theirs)

    @rule(path=st.sampled_from(DIRS))
    def listdir(self, path):
        mine = outcome(lambda: sorted(os.listdir(os.path.join(self.mnt, path))))
        theirs = outcome(lambda: sorted(os.listdir(os.path.join(self.src, path))))
        assert mine == theirs, "%s: mount %r, source %r" % (path, mine, theirs)

    @rule(picks=st.lists(st.sampled_from(PATHS), min_size=1, max_size=12), wait=st.booleans())
    def publish(self, picks, wait):
        # Entries that are missing or directories are accepted and skipped when staged. Each
        # order replaces the last (the same stream and epoch): the daemon outlives the example.
        order = "#stream model\n#epoch 0\n" + "".join(
            os.path.join(self.rel, p) + "\n" for p in picks)
        before = MountModel.session.stats()["prefetch"]["publishes"]
        # fsync publishes on every data path (under no-open a close tells the daemon nothing).
        fd = os.open(os.path.join(MountModel.session.mnt, ".epochfs", "order"),
                     os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.write(fd, order.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if wait:
            self.wait_for_copies(before)

    @rule()
    def walk(self):
        assert tree(self.mnt) == tree(self.src)

    def wait_for_copies(self, publishes_before):
        # The order is published at the close (at RELEASE with no-open), and its copies are
        # queued by the planner after that: wait for the publish, then for two looks 20 ms
        # apart that find no copy queued.
        idle = 0
        for _ in range(500):
            stats = MountModel.session.stats()
            if stats["prefetch"]["publishes"] > publishes_before:
                idle = idle + 1 if stats["cache"]["copies_queued"] == 0 else 0
                if idle == 2:
                    return
            time.sleep(0.02)
        raise AssertionError("the order's copies were not done after 10 s")

    def teardown(self):
        if getattr(self, "src", None):
            shutil.rmtree(self.src, ignore_errors=True)


def cache_within_cap(session):
    cache = session.stats()["cache"]
    assert cache["used_bytes"] <= cache["capacity_bytes"] == 1 << 20, cache


DATA_PATHS = ["classic", "passthrough", "no-open"]


@pytest.mark.parametrize("data_path", DATA_PATHS)
def test_the_mount_shows_what_the_source_shows(data_path):
    session = Session(data_path)
    try:
        MountModel.session = session
        run_state_machine_as_test(
            MountModel,
            settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                              derandomize=True, database=None,
                              suppress_health_check=list(HealthCheck)))
        copies = session.stats()["cache"]
        print(data_path, session.runs, "runs,", session.checks, "checks;", json.dumps({k: copies[k] for k in sorted(copies)
                                     if isinstance(copies[k], int)}))
    finally:
        session.close()
