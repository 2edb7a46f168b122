#!/usr/bin/python3
"""Single-file datasets benchmark: a real reader (numpy memmap, h5py or py-lmdb) reading every
sample of one large file in a shuffled order, over a slowed FUSE source, each way of reading it
side by side in one run.

Lab code (issue 37), not shipped. Run as root (drop_caches, mounts) with Debian's
/usr/bin/python3 (python3-numpy, python3-h5py, python3-lmdb), from the source tree: it uses
the built epochfs and epochfs-slowfs binaries (--build) and the Python package in tools/python.

The setup:

- the dataset: --rows samples of --kb KB in one file of --format: ``npy`` (a 2-D float32
  array read as a memmap), ``hdf5`` (a dataset chunked by --chunk-rows rows, read with h5py)
  or ``lmdb`` (one record per sample, read with py-lmdb);
- the shared storage: epochfs-slowfs serving a copy in memory (/dev/shm), each open taking
  --open-ms, each read (up to 128 KiB) --read-ms, on a link of --mbs MB/s;
- the node's local disk: a fresh journaled ext4 in a loop file with direct I/O, as the
  DataLoader benchmark's (tools/lab/dataloader.py), holding the ideal run's copy and the caches;
- the reader: one process reading each sample in the epoch's order (a permutation seeded by
  the epoch), the page cache dropped before each epoch;
- the runs (--runs): ``ideal`` reads the local disk's copy, ``direct`` the slowed source,
  ``lru`` an epochfs mount with no order, ``ranges`` a mount to which each epoch's ranges are
  published (epochfs.ranges, then epochfs.publish_ranges) as the epoch starts. Both mounts
  get --cache-mb of cache: below the file's size, part of it stays on the source.

Per epoch: samples/s, and for mounts the bytes the daemon read from the source (for misses and
for staging) as a fraction of the file, against the known-future bound 1 - cache/dataset when
the file does not fit. Prints a table; --json writes every figure. Results: docs/benchmarks.md,
"Single-file datasets".
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from dataloader import LocalDisk
from lab import Daemon, stats

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import epochfs  # noqa: E402
import epochfs._lmdb_pages  # noqa: E402
import epochfs.ranges  # noqa: E402
import numpy  # noqa: E402

NAME = {"npy": "data.npy", "hdf5": "data.h5", "lmdb": "data.lmdb"}


def make_dataset(path, a):
    cols = int(a.kb * 1000 / 4)
    rows = numpy.random.default_rng(a.seed).random((a.rows, cols), dtype=numpy.float32)
    if a.format == "npy":
        numpy.save(path, rows)
    elif a.format == "hdf5":
        import h5py
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=rows, chunks=(a.chunk_rows, cols))
    else:
        import lmdb
        env = lmdb.open(path, map_size=rows.nbytes * 2 + (64 << 20))
        with env.begin(write=True) as txn:
            for i in range(a.rows):
                txn.put(b"%08d" % i, rows[i].tobytes())
        env.close()


def data_bytes(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    return os.path.getsize(path)


class Reader:
    """Reads one sample at a time from the dataset at path."""

    def __init__(self, fmt, path):
        self.fmt = fmt
        if fmt == "npy":
            self.rows = numpy.load(path, mmap_mode="r")
        elif fmt == "hdf5":
            import h5py
            self.file = h5py.File(path, "r")
            self.rows = self.file["x"]
        else:
            import lmdb
            self.env = lmdb.open(path, readonly=True, lock=False)
            self.txn = self.env.begin()

    def read(self, i):
        if self.fmt == "lmdb":
            return len(self.txn.get(b"%08d" % i))
        return numpy.array(self.rows[i]).nbytes

    def close(self):
        if self.fmt == "hdf5":
            self.file.close()
        elif self.fmt == "lmdb":
            self.env.close()
        else:
            self.rows._mmap.close()  # unmapped: its pages are dropped with the page cache


def ranges_of(fmt, source_path, mount_path, order, merge=True):
    """The order's ranges, read from the file on the shared storage as a user's script would,
    named by their paths in the mount (merge=False: one per sample, for a manifest)."""
    if fmt == "npy":
        r = epochfs.ranges.npy(source_path, order)
    elif fmt == "hdf5":
        r = epochfs.ranges.hdf5(source_path, "x", order, merge=merge)
    else:
        r = epochfs.ranges.lmdb(source_path, [b"%08d" % i for i in order])
    prefix = os.path.dirname(source_path)
    mnt = os.path.dirname(mount_path)
    in_mount = {p: os.path.join(mnt, os.path.relpath(p, prefix)) for p in {p for p, _, _ in r}}
    return [(in_mount[p], o, n) for p, o, n in r]


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def source_bytes(mnt):
    s = stats(mnt)
    # A whole copy joined from cached blocks is staged, but not from the source.
    return s["bytes_from_source"] + s["cache"]["bytes_staged"] - s["joined_bytes"]


class StagingWatch:
    """When the epoch's last copy landed: the cache's file count, polled every 10 ms."""

    def __init__(self, mnt, start):
        self._mnt, self._start, self._done = mnt, start, threading.Event()
        self._last = (stats(mnt)["cache"]["files_cached"], time.monotonic())
        self._thread = threading.Thread(target=self._poll)
        self._thread.start()

    def _poll(self):
        while not self._done.wait(0.01):
            cached = stats(self._mnt)["cache"]["files_cached"]
            if cached != self._last[0]:
                self._last = (cached, time.monotonic())

    def stop(self):
        self._done.set()
        self._thread.join()
        return self._last[1] - self._start


def wait_for_copies(mnt):
    """Until the order's copies are made: some file cached, none queued or in flight."""
    while True:
        cache = stats(mnt)["cache"]
        if cache["files_cached"] > 0 and cache["copies_queued"] + cache["copies_in_flight"] == 0:
            return
        time.sleep(0.002)


def publish_epoch(a, e, order, path, mnt, source_path):
    if a.publish == "ranges":
        epochfs.publish_ranges(mnt, ranges_of(a.format, source_path, path, order), epoch=e)
        return
    if e == 0:  # the samples' ranges once, in index order: then each epoch's indices
        epochfs.set_range_manifest(
            mnt, ranges_of(a.format, source_path, path, range(a.rows), merge=False))
    epochfs.publish(mnt, order, epoch=e)


def run_epochs(a, path, *, mnt=None, source_path=None):
    rows = []
    orders = [random.Random(a.seed * 1000 + e).sample(range(a.rows), a.rows)
              for e in range(a.epochs)]
    for e, order in enumerate(orders):
        drop_caches()
        before = source_bytes(mnt) if mnt else 0
        reads_before = stats(mnt)["requests"]["read"] if mnt else 0
        start = time.monotonic()
        # --ahead: every epoch published before the first (a stream queues 4 at most).
        if a.ahead:
            to_publish = range(a.epochs) if e == 0 else []
        else:
            to_publish = [e]
        for n in to_publish if source_path else []:
            publish_epoch(a, n, orders[n], path, mnt, source_path)
        published = time.monotonic() - start
        watch = StagingWatch(mnt, start) if mnt and a.timeline else None
        if mnt and a.stage_only:
            wait_for_copies(mnt)
        else:
            reader = Reader(a.format, path)
            for i in order:
                reader.read(i)
            reader.close()
        seconds = time.monotonic() - start
        row = {"epoch": e + 1, "seconds": seconds, "samples_per_s": a.rows / seconds,
               "publish_seconds": published}
        if watch:
            row["staged_seconds"] = watch.stop()
        if mnt:
            row["source_bytes"] = source_bytes(mnt) - before
            row["read_requests"] = stats(mnt)["requests"]["read"] - reads_before
        rows.append(row)
    return rows


def run_one(a, name, dirs):
    name_in = NAME[a.format]
    if name == "ideal":
        return run_epochs(a, os.path.join(dirs["local"], "data", name_in))
    if name == "direct":
        return run_epochs(a, os.path.join(dirs["shared"], name_in))
    mnt = os.path.join(dirs["work"], "mnt-" + name)
    cache = os.path.join(dirs["local"], "cache-" + name)
    argv = [os.path.join(a.build, "bin", "epochfs"), "mount", "--foreground", dirs["shared"],
            mnt, "--cache-dir", cache, "--cache-size", "%dM" % a.cache_mb, "--log-level",
            "warning", "--data-path", a.data_path]
    if a.read_ahead_kb:
        argv += ["--read-ahead", str(a.read_ahead_kb)]
    mount = Daemon(argv, mnt)
    try:
        return run_epochs(a, os.path.join(mnt, name_in), mnt=mnt,
                          source_path=(os.path.join(dirs["shared"], name_in)
                                       if name == "ranges" else None))
    finally:
        mount.stop()
        shutil.rmtree(cache, ignore_errors=True)


def print_table(results, size, cache_bytes):
    ideal = {r["epoch"]: r["samples_per_s"] for r in results.get("ideal", [])}
    direct = {r["epoch"]: r["samples_per_s"] for r in results.get("direct", [])}
    bound = max(0.0, 1 - cache_bytes / size)
    print("dataset %.0f MB, cache %.0f MB: known-future bound %.2f of the file per epoch" % (
        size / 1e6, cache_bytes / 1e6, bound))
    print("%-8s %5s %10s %8s %8s %14s %6s" % ("run", "epoch", "samples/s", "x ideal",
                                               "x direct", "source / file", "READs"))
    for name, rows in results.items():
        for r in rows:
            e = r["epoch"]
            print("%-8s %5d %10.0f %8s %8s %14s %6s" % (
                name, e, r["samples_per_s"],
                "%.2f" % (r["samples_per_s"] / ideal[e]) if e in ideal else "-",
                "%.2f" % (r["samples_per_s"] / direct[e]) if e in direct else "-",
                "%.2f" % (r["source_bytes"] / size) if "source_bytes" in r else "-",
                r.get("read_requests", "-")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/ci", help="the CMake build directory")
    ap.add_argument("--format", choices=sorted(NAME), default="hdf5")
    ap.add_argument("--rows", type=int, default=15000)
    ap.add_argument("--kb", type=float, default=4, help="sample size in KB")
    ap.add_argument("--chunk-rows", type=int, default=16, help="HDF5 rows per chunk")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--cache-mb", type=int, default=1024)
    ap.add_argument("--runs", default="ideal,direct,lru,ranges")
    ap.add_argument("--open-ms", type=float, default=2)
    ap.add_argument("--read-ms", type=float, default=1)
    ap.add_argument("--mbs", type=float, default=200)
    ap.add_argument("--max-background", type=int, default=0,
                    help="reads the kernel sends the source ahead at once (slowfs; 0: 12)")
    ap.add_argument("--publish", choices=("ranges", "indices"), default="indices",
                    help="ranges: each epoch's ranges (publish_ranges); indices: a manifest of "
                    "every sample's range before epoch 1, then each epoch's indices")
    ap.add_argument("--ahead", action="store_true",
                    help="publish every epoch's order before the first (queued ahead)")
    ap.add_argument("--data-path", default="classic", help="the mounts' --data-path")
    ap.add_argument("--stage-only", action="store_true",
                    help="mounts read nothing: each epoch waits until a file is cached and no "
                    "copy is queued or in flight (epoch 1: its publish and copies)")
    ap.add_argument("--timeline", action="store_true",
                    help="record when each epoch's last copy landed (staged_seconds)")
    ap.add_argument("--lmdb-lookups", action="store_true",
                    help="find LMDB records through py-lmdb's lookups, not the tree's pages "
                    "(what epochfs.ranges.lmdb falls back to), to compare the two")
    ap.add_argument("--read-ahead-kb", type=int, default=0,
                    help="the mounts' --read-ahead (KiB; 0: the kernel's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every figure to this file")
    a = ap.parse_args()
    if a.ahead and a.epochs > 4:
        ap.error("--ahead publishes every epoch before the first; a stream queues 4 at most")
    if a.lmdb_lookups:
        epochfs._lmdb_pages.records = lambda data: None  # as for a file it cannot read
    work = tempfile.mkdtemp(prefix="epochfs-ranges-")
    dirs = {"work": work, "shared": os.path.join(work, "shared")}
    served = tempfile.mkdtemp(prefix="epochfs-ranges-source-", dir="/dev/shm")
    dirs["served"] = served
    make_dataset(os.path.join(served, NAME[a.format]), a)
    size = data_bytes(os.path.join(served, NAME[a.format]))
    disk = LocalDisk(work, size * 3 + (256 << 20))
    try:
        dirs["local"] = disk.mount
        os.makedirs(os.path.join(disk.mount, "data"))
        subprocess.run(["cp", "-r", os.path.join(served, NAME[a.format]),
                        os.path.join(disk.mount, "data")], check=True)
        slowfs = Daemon([os.path.join(a.build, "bin", "epochfs-slowfs"), served, dirs["shared"],
                         "--latency-ms", str(a.read_ms), "--open-latency-ms", str(a.open_ms),
                         "--bandwidth-mbs", str(a.mbs), "--max-background",
                         str(a.max_background)], dirs["shared"])
        results = {}
        try:
            for name in a.runs.split(","):
                results[name] = run_one(a, name, dirs)
                print("%s: %s" % (name, " ".join("%.0f" % r["samples_per_s"]
                                                  for r in results[name])),
                      file=sys.stderr, flush=True)
        finally:
            slowfs.stop()
    finally:
        disk.remove()
        shutil.rmtree(served, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, size, a.cache_mb << 20)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"options": vars(a), "dataset_bytes": size, "epochs": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
