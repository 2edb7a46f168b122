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
