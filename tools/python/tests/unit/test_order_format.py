"""The order format handshake, on a fake mount: a daemon that reads another format than the
package writes is refused before anything is written."""

import os

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


@pytest.mark.parametrize("bad", [[1, True], [1, "a"], [1, 2.0]])
def test_an_order_of_indices_holding_anything_else_is_refused(fake_mount, bad):
    with pytest.raises(ValueError, match="holds a path"):
        epochfs.publish(fake_mount.path, bad, epoch=0)
