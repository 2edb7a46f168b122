"""docs/reliability.md I13: what the Python helper accepts, against a real mount.

bytes, path-like and surrogate-escaped names; numpy integer indices; orders too long to hold
in memory (a generator of two million entries, streamed); 64 processes publishing at once.
"""

import multiprocessing
import os
import pathlib
import subprocess
import sys
import time

import pytest

import epochfs

HELPER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(epochfs.__file__)))


def files_of(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def last_publish(mount):
    return mount.stats()["prefetch"]["last_publish"]


def test_bytes_path_like_and_surrogate_escaped_names(mount):
    paths = files_of(mount.path)[:3]
    order = [os.fsencode(paths[0]), pathlib.Path(paths[1]), pathlib.Path(mount.path, paths[2])]
    # A name that is not UTF-8, as os.listdir gives it: the daemon skips that entry, counted,
    # and publishes the rest.
    order.append("train/bad-\udcff.jpg")
    order.append(b"train/bad-\xfe.jpg")
    epochfs.publish(mount.path, order, epoch=0)
    assert last_publish(mount)["accepted"] == 3
    assert last_publish(mount)["rejected"] == 2


def test_numpy_integer_indices(mount):
    numpy = pytest.importorskip("numpy")
    paths = files_of(mount.path)
    epochfs.set_manifest(mount.path, paths)
    order = numpy.random.default_rng(1).permutation(len(paths))  # int64
    epochfs.publish(mount.path, order, epoch=0)
    assert last_publish(mount)["accepted"] == len(paths)
    epochfs.publish(mount.path, order.astype(numpy.uint32)[:10], epoch=0)
    assert last_publish(mount)["accepted"] == 10


def test_orders_that_mix_indices_and_paths_are_refused_before_writing(mount):
    before = mount.stats()["prefetch"]["publishes"]
    with pytest.raises(ValueError, match="holds a path"):
        epochfs.publish(mount.path, [1, "train/x"])
    with pytest.raises(ValueError, match="holds an index"):
        epochfs.publish(mount.path, ["train/x", 1])
    # Nothing was written (the check comes before the first 1 MiB piece): each empty file is
    # refused when the kernel releases it, after the close.
    for _ in range(500):
        s = mount.stats()["prefetch"]
        if s["publishes"] - before == 2:
            break
        time.sleep(0.01)
    assert s["publishes"] - before == 2
    assert s["publish_failures"] >= 2 and not s["last_publish"]["ok"]


def test_a_generator_of_two_million_entries_is_streamed(mount):
    # In a child process, so that its peak memory is its own: a list of the entries alone
    # would take over 150 MB.
    script = """
import os, resource, sys
sys.path.insert(0, %r)
import epochfs
names = sorted(os.listdir(os.path.join(%r, "train", "class_0")))
# Distinct paths (missing ones are accepted at publish): an epoch keeps a file 16 times at most.
order = ("train/class_0/%%s.%%d" %% (names[i %% len(names)], i) for i in range(2000000))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
epochfs.publish(%r, order, epoch=0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
""" % (HELPER_DIR, mount.path, mount.path)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    grown_kib = int(r.stdout)
    assert grown_kib < 32 * 1024
    assert last_publish(mount)["accepted"] == 2000000


def _publish_from_a_worker(args):
    mount_path, i = args
    epochfs.publish(mount_path, ["train/class_%d" % (i % 4)], epoch=0, stream="s%d" % (i % 16))
    return i


def test_64_processes_publish_at_once(mount, monkeypatch):
    # Each stream gets four publishes of epoch 0; the last one wins, none is lost or refused.
    # All 64 publish for one job, which this process keeps alive by publishing for it too (a
    # job's streams are dropped when its publishing processes have exited).
    monkeypatch.setenv("EPOCHFS_JOB", "sixty-four")
    epochfs.publish(mount.path, ["train/class_0"], epoch=0, stream="keep")
    before = mount.stats()["prefetch"]["publishes"]
    with multiprocessing.get_context("fork").Pool(64) as pool:
        assert sorted(pool.map(_publish_from_a_worker, [(mount.path, i) for i in range(64)],
                               chunksize=1)) == list(range(64))
    s = mount.stats()["prefetch"]
    assert s["publishes"] - before == 64
    assert s["publish_failures"] == 0
    assert sorted(mount.streams("sixty-four")) == sorted(
        ["keep"] + ["s%d" % i for i in range(16)])
