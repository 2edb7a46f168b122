"""The order format handshake, on a fake mount: a daemon that reads another format than the
package writes is refused before anything is written."""

import os
import pathlib

import pytest

import epochfs


def test_a_daemon_of_an_older_order_format_is_refused_before_writing(fake_mount):
    with open(os.path.join(fake_mount.control, "stats"), "w") as f:
        f.write("{}")  # a daemon from before the handshake: format 1
    with pytest.raises(epochfs.PublishError, match="reads order format 1.*writes 2"):
        epochfs.publish(fake_mount.path, ["a", "b"], epoch=0)
    assert not os.path.exists(os.path.join(fake_mount.control, "order"))


def test_indices_are_written_alike_from_ints_numpy_integers_and_arrays(fake_mount):
    numpy = pytest.importorskip("numpy")
    order = [7, 0, 2**40, 3]
    epochfs.publish(fake_mount.path, order, epoch=0)
    epochfs.publish(fake_mount.path, [numpy.int32(i) if i < 2**31 else numpy.int64(i)
                                      for i in order], epoch=0)
    epochfs.publish(fake_mount.path, numpy.array(order, dtype=numpy.uint64), epoch=0)
    epochfs.publish(fake_mount.path, (i for i in order), epoch=0)  # no len(): spooled
    written = fake_mount.orders()
    assert len(written) == 4
    assert all(entries == ["7", "0", "1099511627776", "3"] for _, entries in written)
    assert all("#count 4" in header for header, _ in written)


def test_a_long_array_is_written_whole_a_slice_at_a_time(fake_mount):
    numpy = pytest.importorskip("numpy")
    order = numpy.random.default_rng(1).permutation(200_000)  # past one slice of 65,536
    epochfs.publish(fake_mount.path, order, epoch=0)
    (header, entries), = fake_mount.orders()
    assert "#count 200000" in header
    assert entries == [str(i) for i in order.tolist()]


def test_sequences_that_only_look_like_arrays_are_iterated(fake_mount):
    class Column:  # an h5py or zarr dataset: dtype and ndim, no tolist
        dtype = type("dtype", (), {"kind": "i"})()
        ndim = 1

        def __len__(self):
            return 3

        def __iter__(self):
            return iter([2, 0, 1])

    epochfs.publish(fake_mount.path, Column(), epoch=0)
    (header, entries), = fake_mount.orders()
    assert entries == ["2", "0", "1"]


@pytest.mark.parametrize("bad", [[1, True], [1, "a"], [1, 2.0]])
def test_an_order_of_indices_holding_anything_else_is_refused(fake_mount, bad):
    with pytest.raises(ValueError, match="holds a path"):
        epochfs.publish(fake_mount.path, bad, epoch=0)


def test_absolute_paths_are_written_as_relpath_would_write_them(fake_mount):
    # Most paths take a shortcut past os.path.relpath; every kind must come out the same.
    root = fake_mount.path
    tails = ["a/b.jpg", "a//b", "./a", "a/../b", ".hidden/x", "a/", "a/.", "a..b/c", "", "/"]
    order = [root + "/" + t for t in tails] + [root, root + "x/a", "rel/x",
                                               os.fsencode(root + "/bytes")]
    epochfs.publish(fake_mount.path, order, epoch=0)
    (_, entries), = fake_mount.orders()
    want = [p if not os.path.isabs(os.fsdecode(p)) else os.path.relpath(os.fsdecode(p), root)
            for p in order]
    assert entries == want


def test_a_long_order_is_written_whole_a_megabyte_or_more_a_write(fake_mount, monkeypatch):
    # Lines are joined in batches: each write but the last carries 1 MiB or more, and no line
    # is lost or split at a batch's edge.
    sizes = []
    real_write = os.write

    def recording_write(fd, data):
        sizes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", recording_write)
    order = ["d%d/f%d.jpg" % (i % 97, i) for i in range(300_000)]  # ~4.4 MB
    epochfs.publish(fake_mount.path, order, epoch=0)
    monkeypatch.undo()
    (header, entries), = fake_mount.orders()
    assert "#count 300000" in header
    assert entries == order
    assert len(sizes) > 2
    assert all(size >= 1 << 20 for size in sizes[:-1])


def test_ranges_are_written_alike_from_ints_numpy_integers_and_path_objects(fake_mount):
    numpy = pytest.importorskip("numpy")
    a = os.path.join(fake_mount.path, "a.bin")
    ranges = [(a, 0, 10), ("b.bin", 2**40, 4096), (a, 7, 1), (a, 9, 3)]
    epochfs.publish_ranges(fake_mount.path, ranges, epoch=0)
    epochfs.publish_ranges(fake_mount.path, [
        (pathlib.Path(p), numpy.int64(o), numpy.uint32(n)) for p, o, n in ranges], epoch=0)
    written = fake_mount.orders()
    assert [entries for _, entries in written] == [
        ["0 10 a.bin", "1099511627776 4096 b.bin", "7 1 a.bin", "9 3 a.bin"]] * 2
    with pytest.raises(ValueError, match="offset >= 0"):
        epochfs.publish_ranges(fake_mount.path, [(a, 0, 10), (a, -1, 10)], epoch=0)
