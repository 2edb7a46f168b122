"""Fixtures: a generated ImageFolder dataset and a real epochfs mount of it.

EPOCHFS_BINARY names the epochfs executable (ctest sets it). Every mount is unmounted at the
end of its test, lazily if needed, even when the test fails.
"""

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

BINARY = os.environ.get("EPOCHFS_BINARY", "epochfs")


def make_images(root, files=120, classes=4, size=32):
    from PIL import Image

    rng = random.Random(1)
    for i in range(files):
        cls = os.path.join(root, "class_%d" % (i % classes))
        os.makedirs(cls, exist_ok=True)
        pixels = rng.randbytes(size * size * 3)
        Image.frombytes("RGB", (size, size), pixels).save(os.path.join(cls, "img_%04d.jpg" % i))


class Mount:
    def __init__(self, source, path, cache):
        self.path = path
        os.makedirs(path)
        subprocess.run([BINARY, "mount", source, path, "--cache-dir", cache, "--log-level",
                        "warning"], check=True, stdin=subprocess.DEVNULL)

    def stats(self):
        import epochfs
        return epochfs.stats(self.path)

    def wait_idle(self):
        for _ in range(1000):
            if self.stats()["cache"]["copies_queued"] == 0:
                return
            time.sleep(0.01)
        raise AssertionError("copies still queued")

    def unmount(self):
        if subprocess.run([BINARY, "unmount", self.path], stdin=subprocess.DEVNULL).returncode:
            subprocess.run(["umount", "-l", self.path])


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="epochfs-py-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def image_source(workdir):
    src = os.path.join(workdir, "src")
    make_images(os.path.join(src, "train"))
    return src


@pytest.fixture
def mount(workdir, image_source):
    m = Mount(image_source, os.path.join(workdir, "mnt"), os.path.join(workdir, "cache"))
    try:
        yield m
    finally:
        m.unmount()
