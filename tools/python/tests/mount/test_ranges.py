"""Range orders from Python (epochfs.publish_ranges, epochfs.ranges) with the real readers:
numpy memmap, h5py and py-lmdb read every sample through a mount, in a shuffled order, after
the order was published; each gets the source's bytes, served from the blocks staged."""

import os
import random

import pytest

import epochfs
import epochfs.ranges

from conftest import Mount

np = pytest.importorskip("numpy")


def mounted(workdir, files):
    """A mount of a source holding files {name: writer(path)}."""
    src = os.path.join(workdir, "src")
    os.makedirs(src)
    for name, write in files.items():
        write(os.path.join(src, name))
    return src, Mount(src, os.path.join(workdir, "mnt"), os.path.join(workdir, "cache"))


def in_mount(ranges, src, mnt):
    """Ranges computed from the source's files, named by their paths in the mount."""
    return [(os.path.join(mnt, os.path.relpath(p, src)), o, n) for p, o, n in ranges]


def blocks_of(ranges):
    return {(p, b) for p, o, n in ranges for b in range(o >> 20, ((o + n - 1) >> 20) + 1)}


def staged(m, ranges):
    published = m.stats()["prefetch"]["last_publish"]
    assert published["ok"], published
    m.wait_cached(len(blocks_of(ranges)))
    return m.stats()


ROWS = 3000
array = np.random.default_rng(1).random((ROWS, 250), dtype=np.float32)  # 1 KB rows, 3 MB


def test_npy_rows_in_a_shuffled_order(workdir):
    src, m = mounted(workdir, {"a.npy": lambda p: np.save(p, array)})
    try:
        order = random.Random(2).sample(range(ROWS), ROWS)
        ranges = epochfs.ranges.npy(os.path.join(src, "a.npy"), order)
        published = epochfs.publish_ranges(m.path, in_mount(ranges, src, m.path))
        assert published.found == published.looked_up > 0
        staged(m, ranges)
        rows = np.load(os.path.join(m.path, "a.npy"), mmap_mode="r")
        for i in order:
            assert np.array_equal(rows[i], array[i])
        stats = m.stats()
        assert stats["block_hits"] > 0
        assert stats["block_misses"] == 0
        assert stats["bytes_from_source"] == 0
    finally:
        m.unmount()


def test_hdf5_rows_contiguous_and_chunked(workdir):
    h5py = pytest.importorskip("h5py")

    def write(path):
        with h5py.File(path, "w") as f:
            f.create_dataset("flat", data=array)
            f.create_dataset("chunked", data=array, chunks=(64, 250), compression="gzip")

    src, m = mounted(workdir, {"d.h5": write})
    try:
        order = random.Random(3).sample(range(ROWS), 500)
        ranges = []
        for name in ("flat", "chunked"):
            ranges += epochfs.ranges.hdf5(os.path.join(src, "d.h5"), name, order)
        epochfs.publish_ranges(m.path, in_mount(ranges, src, m.path))
        staged(m, ranges)
        with h5py.File(os.path.join(m.path, "d.h5"), "r") as f:
            for name in ("flat", "chunked"):
                for i in order:
                    assert np.array_equal(f[name][i], array[i])
        assert m.stats()["block_hits"] > 0
        # A manifest's index i names ranges[i]: one range per row, the chunks repeated.
        path = os.path.join(src, "d.h5")
        merged = epochfs.ranges.hdf5(path, "chunked", range(ROWS))
        each = epochfs.ranges.hdf5(path, "chunked", range(ROWS), merge=False)
        assert len(merged) < ROWS and len(each) == ROWS
        assert each[0] == each[63] == merged[0] and each[64] == merged[1]
    finally:
        m.unmount()


def test_lmdb_records_by_key(workdir):
    lmdb = pytest.importorskip("lmdb")
    values = {b"k%05d" % i: os.urandom(500 + i % 3000) for i in range(2000)}

    def write(path):
        env = lmdb.open(path, map_size=1 << 28)
        with env.begin(write=True) as txn:
            for k, v in values.items():
                txn.put(k, v)
        env.close()

    src, m = mounted(workdir, {"db": write})
    try:
        keys = random.Random(4).sample(sorted(values), len(values))
        ranges = epochfs.ranges.lmdb(os.path.join(src, "db"), keys)
        assert len(ranges) == len(keys)
        epochfs.publish_ranges(m.path, in_mount(ranges, src, m.path))
        staged(m, ranges)
        env = lmdb.open(os.path.join(m.path, "db"), readonly=True, lock=False)
        with env.begin() as txn:
            for k in keys:
                assert txn.get(k) == values[k]
        env.close()
        assert m.stats()["block_hits"] > 0
    finally:
        m.unmount()


def test_for_indices_and_bad_ranges(workdir):
    src, m = mounted(workdir, {"f.bin": lambda p: open(p, "wb").write(os.urandom(3 << 20))})
    try:
        path = os.path.join(m.path, "f.bin")
        ranges = epochfs.ranges.for_indices(
            lambda i: [(path, i << 20, 10), (path, (i << 20) + 500, 10)], [2, 0])
        assert [r[1] for r in ranges] == [2 << 20, (2 << 20) + 500, 0, 500]
        published = epochfs.publish_ranges(m.path, ranges)
        assert published.accepted == 2  # two blocks, each a run of two samples
        with pytest.raises(ValueError):
            epochfs.publish_ranges(m.path, [(path, -1, 10)])
        with pytest.raises(ValueError):
            epochfs.publish_ranges(m.path, [(path, 0, 0)])
    finally:
        m.unmount()


def test_a_range_manifest_then_orders_of_indices(workdir):
    src, m = mounted(workdir, {"a.npy": lambda p: np.save(p, array)})
    try:
        ranges = epochfs.ranges.npy(os.path.join(src, "a.npy"), range(ROWS))
        epochfs.set_range_manifest(m.path, in_mount(ranges, src, m.path))
        order = random.Random(5).sample(range(ROWS), ROWS)
        published = epochfs.publish(m.path, order, epoch=0)
        assert published.accepted > 0
        staged(m, ranges)
        rows = np.load(os.path.join(m.path, "a.npy"), mmap_mode="r")
        for i in order:
            assert np.array_equal(rows[i], array[i])
        assert m.stats()["block_hits"] > 0
    finally:
        m.unmount()
