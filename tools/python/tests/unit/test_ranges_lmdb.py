"""LMDB records found from the data file's pages (epochfs._lmdb_pages) against py-lmdb's own
lookups, for trees one to three levels deep and records inline or on overflow pages; and the
ranges epochfs.ranges.lmdb gives point at each record's bytes either way."""

import os
import random

import pytest

import epochfs.ranges
from epochfs import _lmdb_pages

lmdb = pytest.importorskip("lmdb")


def make(path, values, **flags):
    env = lmdb.open(path, map_size=1 << 28, **flags)
    with env.begin(write=True) as txn:
        for k, v in values.items():
            txn.put(k, v)
    env.close()


def looked_up(path, keys):
    env = lmdb.open(path, readonly=True, lock=False)
    try:
        data = os.path.join(path, "data.mdb")
        return {k: (o, n) for k, (_, o, n) in zip(keys, epochfs.ranges._looked_up(env, data, keys))}
    finally:
        env.close()


@pytest.mark.parametrize("records,sizes", [(0, [1]), (10, [100]), (3000, [20, 900, 5000]),
                                           (60000, [16])])
def test_pages_give_what_lookups_give(tmp_path, records, sizes):
    path = str(tmp_path / "db")
    rng = random.Random(records)
    values = {b"k%08d" % rng.randrange(10**8): rng.randbytes(rng.choice(sizes))
              for _ in range(records)}
    make(path, values)
    found = _lmdb_pages.records(os.path.join(path, "data.mdb"))
    assert found == looked_up(path, sorted(values))
    if records == 60000:
        env = lmdb.open(path, readonly=True, lock=False)
        assert env.stat()["depth"] >= 3  # root, branches, leaves
        env.close()


def test_sub_databases_and_other_files_are_left_to_lookups(tmp_path):
    path = str(tmp_path / "db")
    make(path, {b"a": b"1"})
    env = lmdb.open(path, map_size=1 << 24, max_dbs=2)
    env.open_db(b"dups", dupsort=True)  # a sub-database: a node the pages do not read
    env.close()
    assert _lmdb_pages.records(os.path.join(path, "data.mdb")) is None
    with open(str(tmp_path / "not-lmdb"), "wb") as f:
        f.write(os.urandom(16384))
    assert _lmdb_pages.records(str(tmp_path / "not-lmdb")) is None


@pytest.mark.parametrize("few", [False, True])
def test_ranges_point_at_every_record(tmp_path, few):
    path = str(tmp_path / "db")
    rng = random.Random(5)
    values = {b"r%06d" % i: rng.randbytes(rng.choice([20, 900, 5000])) for i in range(3000)}
    make(path, values)
    keys = rng.sample(sorted(values), 5 if few else len(values)) + [b"missing"]
    ranges = epochfs.ranges.lmdb(path, keys)
    assert len(ranges) == len(keys) - 1  # the missing key left out
    with open(os.path.join(path, "data.mdb"), "rb") as f:
        for key, (data, offset, length) in zip(keys, ranges):
            f.seek(offset)
            assert f.read(length) == values[key]


def _patched(path, edit):
    """The data file of path with edit(bytearray of it) applied: a corrupt copy of a database."""
    data = os.path.join(path, "data.mdb")
    with open(data, "rb") as f:
        image = bytearray(f.read())
    edit(image)
    with open(data, "wb") as f:
        f.write(image)
    return data


def test_a_corrupt_tree_is_left_to_lookups(tmp_path):
    values = {b"k%06d" % i: b"v" * 16 for i in range(3000)}  # a root branch over leaves
    psize, main = 4096, _lmdb_pages._MAIN

    def field(image, at, size):
        return int.from_bytes(image[at:at + size], "little")

    def newer_meta(image):
        return max((0, psize), key=lambda m: field(image, m + _lmdb_pages._TXNID, 8))

    def set_depth(image, depth):
        meta = newer_meta(image)
        image[meta + main + 6:meta + main + 8] = depth.to_bytes(2, "little")

    def deep(image):  # a tree deeper than lmdb itself can walk
        set_depth(image, 40)

    def self_pointing(image):  # the root's children all name the root, 32 levels down
        meta = newer_meta(image)
        assert field(image, meta + main + 6, 2) == 2
        set_depth(image, 32)  # unchecked, the pages to read would grow as (children)^level
        root = field(image, meta + main + 40, 8)
        page = root * psize
        for i in range((field(image, page + 12, 2) - 16) // 2):
            at = page + field(image, page + 16 + 2 * i, 2)
            image[at:at + 4] = (root & 0xFFFFFFFF).to_bytes(4, "little")

    for name, edit in (("deep", deep), ("self", self_pointing)):
        path = str(tmp_path / name)
        make(path, values)
        assert _lmdb_pages.records(os.path.join(path, "data.mdb")) is not None
        assert _lmdb_pages.records(_patched(path, edit)) is None, name
