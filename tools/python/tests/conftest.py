"""Fixtures: a generated ImageFolder dataset and a real epochfs mount of it; a fake mount.

unit/ holds the tests that need no daemon (a fake mount at most), mount/ those against a real
epochfs mount; both share these fixtures and loader_helpers.py.

EPOCHFS_BINARY names the epochfs executable (ctest sets it). Every mount is unmounted at the
end of its test, lazily if needed, even when the test fails.

The fake mount is a directory that epochfs.find_mount takes for a mount (its .epochfs/stats
is a regular file): what the helper writes into .epochfs/ stays there to be read back, so the
header lines and entries it writes are checked without a daemon.
"""

import os
import random
import shutil
import subprocess
import tempfile
import time

import pytest

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
    def __init__(self, source, path, cache, options=()):
        self.path = path
        os.makedirs(path)
        subprocess.run([BINARY, "mount", source, path, "--cache-dir", cache, "--log-level",
                        "warning", *options], check=True, stdin=subprocess.DEVNULL)

    def stats(self):
        import epochfs
        return epochfs.stats(self.path)

    def streams(self, job=None):
        """{stream name: its stats} of ``job``'s streams (this process's job if None)."""
        import epochfs
        job = epochfs.job_id() if job is None else job
        return {s["stream"]: s for s in self.stats()["prefetch"]["streams"].values()
                if s["job"] == job}

    def stream(self, name, job=None):
        return self.streams(job)[name]

    def wait_cached(self, files):
        """Wait until ``files`` copies are ready and none is queued.

        "Nothing queued" alone is true too before the planner's first pass after a publish.
        """
        for _ in range(1000):
            cache = self.stats()["cache"]
            if cache["files_cached"] >= files and cache["copies_queued"] == 0:
                return
            time.sleep(0.01)
        raise AssertionError("%d files cached, %d wanted" % (cache["files_cached"], files))

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


def split_header(text):
    """(header lines, entry lines) of a file the helper wrote."""
    lines = text.splitlines()
    n = 0
    while n < len(lines) and lines[n].startswith("#"):
        n += 1
    # Every upload ends its header with "#line 1" (the order's own line numbers in the daemon's
    # reports); the tests compare the headers that carry meaning.
    assert lines[n - 1] == "#line 1", lines[:n]
    return lines[:n - 1], lines[n:]


class FakeMount:
    def __init__(self, path, monkeypatch):
        import epochfs

        self.path = path
        self.control = os.path.join(path, ".epochfs")
        os.makedirs(self.control)
        with open(os.path.join(self.control, "stats"), "w") as f:
            f.write('{"order_format": %d}' % epochfs.ORDER_FORMAT)
        # Each manifest is written to the same name: keep a copy of each as it is written.
        self.manifests = []
        real = epochfs.set_manifest

        def keep(*args, **kwargs):
            real(*args, **kwargs)
            with open(os.path.join(self.control, "manifest"), encoding="utf-8") as f:
                self.manifests.append(split_header(f.read()))

        monkeypatch.setattr(epochfs, "set_manifest", keep)

    def orders(self):
        """(header lines, entry lines) of every order written, oldest first."""
        names = [n for n in os.listdir(self.control) if n.startswith("order-")]
        out = []
        for name in sorted(names, key=lambda n: [int(x) for x in n.split("-")[1:]]):
            with open(os.path.join(self.control, name), encoding="utf-8") as f:
                out.append(split_header(f.read()))
        return out


@pytest.fixture
def fake_mount(workdir, monkeypatch):
    return FakeMount(os.path.join(workdir, "fake"), monkeypatch)


JOB_VARIABLES = ("EPOCHFS_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                 "EPOCHFS_STRICT")


@pytest.fixture
def clean_env(monkeypatch):
    """No job or strict-mode variable from the environment the tests run in."""
    for name in JOB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch
