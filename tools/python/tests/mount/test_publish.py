"""epochfs.publish, set_manifest, stats and is_epochfs against a real mount."""

import os
import subprocess
import sys

import pytest

import epochfs


def files_of(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def test_is_epochfs_finds_the_mount_from_a_subdirectory(mount, workdir):
    assert epochfs.is_epochfs(mount.path)
    assert epochfs.find_mount(os.path.join(mount.path, "train")) == mount.path
    assert not epochfs.is_epochfs(workdir)


def test_publish_paths(mount):
    paths = files_of(mount.path)[:10]
    epochfs.publish(os.path.join(mount.path, "train"), paths, epoch=3, stream="r0")
    assert mount.stats()["prefetch"]["last_publish"]["accepted"] == 10
    assert mount.stream("r0")["epoch"] == 3
    assert mount.stream("r0")["epoch_length"] == 10


def test_publish_returns_what_it_matched(mount):
    paths = files_of(mount.path)[:10]
    published = epochfs.publish(mount.path, paths)
    assert published.accepted == 10
    assert published.looked_up == 10
    assert published.found == 10
    assert not published.mostly_missing
    assert "10 entries published" in published.message


def test_an_order_of_paths_relative_to_the_wrong_directory_warns(mount):
    # The paths of a data dir one level down ("train/"), given without it.
    paths = [os.path.relpath(p, "train") for p in files_of(mount.path)[:20]]
    with pytest.warns(UserWarning, match="0 of the 16 entries looked up"):
        published = epochfs.publish(mount.path, paths)
    assert published.accepted == 20
    assert (published.looked_up, published.found) == (16, 0)
    assert published.mostly_missing
    assert "relative to the source's root" in published.message


def test_publish_absolute_paths_inside_the_mount(mount):
    paths = [os.path.join(mount.path, p) for p in files_of(mount.path)[:5]]
    epochfs.publish(mount.path, paths)
    assert mount.stats()["prefetch"]["last_publish"]["accepted"] == 5


def test_publish_indices_into_the_manifest(mount):
    paths = files_of(mount.path)
    epochfs.set_manifest(mount.path, paths)
    assert mount.stats()["prefetch"]["manifest_entries"] == len(paths)
    epochfs.publish(mount.path, [5, 3, 1])
    assert mount.stats()["prefetch"]["last_publish"]["accepted"] == 3


def test_an_unusable_order_raises_with_the_daemons_reason(mount):
    with pytest.raises(epochfs.PublishError, match="no usable entries"):
        epochfs.publish(mount.path, ["../outside", "/etc/passwd"])


def test_a_writer_killed_mid_file_publishes_nothing(mount):
    # A writer of an order with a #count header (as the helper writes), killed halfway.
    script = """
import os, sys
sys.path.insert(0, %r)
import epochfs
lines = ["#count 100"] + ["train/x%%d" %% i for i in range(50)]
fd = os.open(os.path.join(%r, ".epochfs", "order"), os.O_WRONLY | os.O_CREAT, 0o600)
os.write(fd, ("\\n".join(lines) + "\\n").encode())
os._exit(9)
""" % (os.path.dirname(os.path.dirname(epochfs.__file__)), mount.path)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    s = mount.stats()["prefetch"]
    assert s["publish_failures"] == 1
    assert s["schedule_entries"] == 0
    assert "cut short" in s["last_publish"]["message"]


def test_stats_outside_a_mount_fails_clearly(workdir):
    with pytest.raises(FileNotFoundError):
        epochfs.stats(workdir)


def test_the_daemon_reads_the_order_format_the_package_writes(mount):
    assert mount.stats()["order_format"] == epochfs.ORDER_FORMAT
