#!/usr/bin/python3
"""DataLoader benchmark: a real PyTorch input pipeline over a slowed FUSE source, every way of
reading it side by side in one run, with the epochfs daemon's CPU per staged file and per hit.

Lab code (issue 26), not shipped. Run as root (drop_caches) with Debian's /usr/bin/python3
(python3-torch, python3-torchvision), from the source tree: it uses the built epochfs and
epochfs-slowfs binaries (--build) and the Python package in tools/python.

The setup:

- --files files of about --kb KB (random bytes, 10 class folders) in data/train on the local
  disk (below);
- the shared storage: epochfs-slowfs serving a copy of the data kept in memory (/dev/shm: the
  storage server's own cache, which dropping this node's page cache does not touch) at
  <dir>/shared, each open taking --open-ms, each read (up to 128 KiB) --read-ms, read data
  sharing a link of --mbs MB/s. With --source-on-disk it serves the local disk's data: then the
  source can go no faster than the local disk the ideal run reads, whatever --mbs says;
- the node's local disk (the dataset the ideal run reads, copy-first's copy, the mounts'
  caches): a fresh ext4 filesystem (with its journal, as mkfs.ext4 makes it) in a loop file
  under <dir>, read with direct I/O, as a node's scratch NVMe. --local-disk here uses <dir>
  itself: where that is ext4 without a journal, every new file costs the kernel a search past
  the inodes freed in the last minutes (ext4's recently_deleted), and staging 110 KB files on
  this machine's disk went ~2.5x slower than on the loop file;
- the trainer: ``torchvision.datasets.ImageFolder`` whose loader reads each file whole into a
  tensor, a ``DataLoader`` with --workers worker processes and batches of --batch, and
  --compute-ms of sleep per batch for the GPU;
- the runs (--runs): ``ideal`` reads data on the local disk, ``direct`` the slowed source,
  ``epochfs-classic`` and ``epochfs-auto`` a mount over it with that --data-path and the
  sampler wrapped in ``epochfs.torch.PublishingSampler``, ``lru`` a mount with no order
  published (``--lookahead 0``), ``copy-first`` copies the dataset to the local disk before
  training (the copy counted in epoch 1);
- each run's epochs one after the other in a fresh trainer process, the page cache's file
  pages dropped before each epoch;
- when the order is published: by default (``--order ahead``) the sampler has a seeded
  generator, so ``PublishingSampler`` publishes epoch 1 when made and each next epoch ahead;
  with ``--order at-start`` it is ``RandomSampler`` without a generator (what
  ``DataLoader(shuffle=True)`` makes; seeded through torch's global seed), whose order exists
  only when the epoch's ``__iter__`` draws it: published then, the loader iterating at once.

For epochfs runs, each epoch also reports the misses, waits and stall, and the bytes read from
the source by misses and by staging; and, polled (every 5 ms until then, or for its first
second), the time to its first staged file from the epoch's start ("1st copy") and from the last
publish returned before it ("pub->copy"), and the misses, waits and stall of its first second.
"x floor" is the link's floor over the epoch's time: no epoch that reads its bytes through the
source's link ends before its first copy lands, plus those bytes at --mbs, plus one batch's
compute.

The daemon's CPU is read from /proc/<pid>/stat (user + system, all threads) at each epoch's
start and end. The CPU per hit is the last epoch's CPU over its hits (when it staged
nothing); the CPU per staged file is epoch 1's CPU less its hits at that rate, over the files
staged in it.

Prints a table and, with --json, writes every figure. Results: docs/benchmarks.md, "A real
DataLoader over a slowed FUSE source".
"""

import argparse
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

from lab import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_PACKAGE = os.path.join(HERE, "..", "python")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU of process pid, all its threads (live and ended), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def make_dataset(root, files, kb, seed):
    rng = random.Random(seed)
    for i in range(files):
        folder = os.path.join(root, "c%d" % (i % 10))
        os.makedirs(folder, exist_ok=True)
        size = max(1024, int(rng.lognormvariate(0, 0.3) * kb * 1000 / 1.046))
        with open(os.path.join(folder, "f%06d.bin" % i), "wb") as f:
            f.write(os.urandom(size))


def trainer_main(a):
    """The trainer (in its own process): one JSON line per epoch on stdout."""
    sys.path.insert(0, PYTHON_PACKAGE)
    import torch
    import torchvision
    from torch.utils.data import DataLoader, RandomSampler
    import epochfs
    import epochfs.torch

    # The point is more workers than cores, as on a GPU node whose cores decode.
    warnings.filterwarnings("ignore", message="This DataLoader will create")

    def load(path):
        with open(path, "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)

    def collate(batch):
        return len(batch), torch.tensor([label for _, label in batch])

    def drop_pages():
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")

    # copy-first: the copy belongs to epoch 1's time.
    copy_seconds = 0
    if a.copy_from:
        drop_pages()
        start = time.monotonic()
        copy_tree(a.copy_from, a.data_root)
        copy_seconds = time.monotonic() - start
    dataset = torchvision.datasets.ImageFolder(a.data, loader=load, is_valid_file=lambda p: True)
    if a.order == "at-start":
        torch.manual_seed(a.seed)
        sampler = RandomSampler(dataset)
    else:
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(a.seed))
    published_at = []  # time.monotonic() as each publish returned

    def timed(publish):
        def wrapper(*args, **kwargs):
            try:
                return publish(*args, **kwargs)
            finally:
                published_at.append(time.monotonic())
        return wrapper

    epochfs.publish = timed(epochfs.publish)
    if a.publish:
        sampler = epochfs.torch.PublishingSampler(sampler, a.data,
                                                  epochfs.torch.dataset_paths(dataset))
    loader = DataLoader(dataset, sampler=sampler, batch_size=a.batch, num_workers=a.workers,
                        persistent_workers=True, collate_fn=collate)
    on_mount = epochfs.is_epochfs(a.data)
    for epoch in range(a.epochs):
        if not (epoch == 0 and a.copy_from):
            drop_pages()
        before = epochfs.stats(a.data) if on_mount else None
        latency_before = open_latency(a.data) if on_mount else None
        cpu_before = cpu_seconds(a.daemon_pid) if a.daemon_pid else 0
        start = time.monotonic() - (copy_seconds if epoch == 0 else 0)
        watch = FirstSecond(a.data, before, start, published_at) if on_mount else None
        samples = 0
        for count, _labels in loader:
            time.sleep(a.compute_ms / 1000)
            samples += count
        seconds = time.monotonic() - start
        row = {"epoch": epoch + 1, "samples": samples, "seconds": round(seconds, 3),
               "samples_per_s": round(samples / seconds, 1)}
        if a.daemon_pid:
            row["daemon_cpu_s"] = round(cpu_seconds(a.daemon_pid) - cpu_before, 3)
        if on_mount:
            after = epochfs.stats(a.data)
            row["hits"] = after["hits"] - before["hits"]
            row["misses"] = after["misses"] - before["misses"]
            row["files_staged"] = (after["cache"]["files_staged"]
                                   - before["cache"]["files_staged"])
            row.update(stall_counters(before, after))
            staged_bytes = after["cache"]["bytes_staged"] - before["cache"]["bytes_staged"]
            row["mb_staged"] = round(staged_bytes / 1e6, 1)
            row.update(watch.finish())
            row.update(open_latency_delta(latency_before, open_latency(a.data)))
        print(json.dumps(row), flush=True)


def open_latency(data):
    """The mount's open latency histogram (docs/stats.md, metrics): {le: count}, sum, count."""
    buckets, total, count = {}, 0.0, 0
    with open(os.path.join(data, "..", ".epochfs", "metrics"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("epochfs_open_latency_seconds_bucket"):
                le = line.split('le="', 1)[1].split('"', 1)[0]
                buckets[le] = int(float(line.rsplit(" ", 1)[1]))
            elif line.startswith("epochfs_open_latency_seconds_sum"):
                total = float(line.rsplit(" ", 1)[1])
            elif line.startswith("epochfs_open_latency_seconds_count"):
                count = int(float(line.rsplit(" ", 1)[1]))
    return buckets, total, count


def open_latency_delta(before, after):
    """Mean open time and opens slower than 1 ms between two open_latency() readings."""
    opens = after[2] - before[2]
    if opens == 0:
        return {}
    fast = after[0].get("0.001", 0) - before[0].get("0.001", 0)
    return {"open_us": round((after[1] - before[1]) / opens * 1e6),
            "slow_opens": opens - fast}


def stall_counters(before, after):
    """Misses, waits, stall and bytes read from the source (by misses) between two stats."""
    return {"misses": after["misses"] - before["misses"],
            "waits": after["waits"] - before["waits"],
            "stall_s": round(after["stall_seconds"] - before["stall_seconds"], 3),
            "mb_from_source": round((after["bytes_from_source"]
                                     - before["bytes_from_source"]) / 1e6, 1)}


class FirstSecond:
    """Polls a mount's stats from an epoch's start, every 5 ms until its first copy is staged
    or its first second ends, then every 100: when its first copy was staged, after the epoch's
    start and after the publish before it (published_at: when each publish returned), and its
    misses, waits and stall in its first second."""

    def __init__(self, data, before, start, published_at):
        import threading
        self.data, self.before, self.start = data, before, start
        self.published_at = published_at
        self.first_staged_s = self.publish_to_staged_s = None
        self.first_second = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self):
        import epochfs
        staged_before = self.before["cache"]["files_staged"]
        polls = 0
        while not self.stop.is_set():
            polls += 1
            now = time.monotonic() - self.start
            stats = epochfs.stats(self.data)
            if self.first_staged_s is None and stats["cache"]["files_staged"] > staged_before:
                self.first_staged_s = round(now, 3)
                publishes = [t - self.start for t in self.published_at if t - self.start <= now]
                if publishes and polls > 1:  # else it was staged before the epoch started
                    self.publish_to_staged_s = round(now - publishes[-1], 3)
            if self.first_second is None and now >= 1:
                self.first_second = stall_counters(self.before, stats)
            if self.first_staged_s is not None and self.first_second is not None:
                return
            # Past the first second (a warm epoch stages nothing), polls would only cost the
            # trainer and the daemon CPU that the ideal run does not pay.
            self.stop.wait(0.005 if now < 1 and self.first_staged_s is None else 0.1)

    def finish(self):
        self.stop.set()
        self.thread.join()
        out = {"first_staged_s": self.first_staged_s,
               "publish_to_staged_s": self.publish_to_staged_s}
        for key, value in (self.first_second or {}).items():
            out["first_s_" + key] = value
        return out


def copy_tree(source, target):
    """Copies every file of source into target with 8 threads (copy-first's epoch 1)."""
    files = []
    for folder, _dirs, names in os.walk(source):
        rel = os.path.relpath(folder, source)
        os.makedirs(os.path.join(target, rel), exist_ok=True)
        files += [os.path.join(rel, n) for n in names]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: shutil.copyfile(os.path.join(source, p),
                                                os.path.join(target, p)), files))


class LocalDisk:
    """A fresh ext4 filesystem in a loop file under work, mounted until remove()."""

    def __init__(self, work, size):
        self.image = os.path.join(work, "local.ext4")
        self.mount = os.path.join(work, "local")
        os.makedirs(self.mount, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(int(size))
        subprocess.run(["mkfs.ext4", "-q", "-F", self.image], check=True)
        # Direct I/O: the loop device reads the disk, not a second page cache of the image.
        self.device = subprocess.run(["losetup", "--direct-io=on", "--find", "--show",
                                      self.image], check=True, capture_output=True,
                                     text=True).stdout.strip()
        subprocess.run(["mount", self.device, self.mount], check=True)

    def remove(self):
        subprocess.run(["umount", self.mount], check=False)
        subprocess.run(["losetup", "--detach", self.device], check=False)
        os.unlink(self.image)


def run_trainer(a, data, *, publish, daemon_pid=0, copy_from=None, data_root=None):
    argv = [sys.executable, os.path.abspath(__file__), "--trainer", "--data", data,
            "--epochs", str(a.epochs), "--workers", str(a.workers), "--batch", str(a.batch),
            "--compute-ms", str(a.compute_ms), "--seed", str(a.seed),
            "--daemon-pid", str(daemon_pid), "--order", a.order]
    if publish:
        argv.append("--publish")
    if copy_from:
        argv += ["--copy-from", copy_from, "--data-root", data_root]
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def run_one(a, name, dirs):
    shared_train = os.path.join(dirs["shared"], "train")
    if name == "ideal":
        return run_trainer(a, os.path.join(dirs["data"], "train"), publish=False)
    if name == "direct":
        return run_trainer(a, shared_train, publish=False)
    if name == "copy-first":
        local = os.path.join(dirs["local"], "copy")
        shutil.rmtree(local, ignore_errors=True)
        os.makedirs(local)
        try:
            return run_trainer(a, os.path.join(local, "train"), publish=False,
                               copy_from=dirs["shared"], data_root=local)
        finally:
            shutil.rmtree(local, ignore_errors=True)
    mnt = os.path.join(dirs["work"], "mnt-" + name)
    cache = os.path.join(dirs["local"], "cache-" + name)
    os.makedirs(mnt, exist_ok=True)
    argv = [os.path.join(a.build, "bin", "epochfs"), "mount", "--foreground",
            dirs["shared"], mnt, "--cache-dir", cache, "--log-level", "warning"]
    if name == "lru":
        argv += ["--lookahead", "0"]
    else:
        argv += ["--data-path", name.split("-", 1)[1]]
    argv += a.mount_args.split()
    mount = Daemon(argv, mnt)
    try:
        return run_trainer(a, os.path.join(mnt, "train"), publish=name != "lru",
                           daemon_pid=mount.proc.pid)
    finally:
        mount.stop()
        shutil.rmtree(cache, ignore_errors=True)


def cpu_per_file(rows):
    """(µs of daemon CPU per staged file, per hit), from epoch 1 and the last epoch."""
    first, last = rows[0], rows[-1]
    if "daemon_cpu_s" not in first or len(rows) < 2 or last["files_staged"] > 0:
        return None, None
    per_hit = last["daemon_cpu_s"] / max(1, last["hits"])
    staged = first["files_staged"]
    per_staged = (first["daemon_cpu_s"] - first["hits"] * per_hit) / staged if staged else None
    return (round(per_staged * 1e6) if per_staged else None), round(per_hit * 1e6)


def add_link_floor(a, rows):
    """Sets each epoch's link_floor_s (see the module's comment) where it read the source."""
    for r in rows:
        mb = r.get("mb_staged", 0) + r.get("mb_from_source", 0)
        if r.get("first_staged_s") is not None and mb > 0:
            r["link_floor_s"] = round(r["first_staged_s"] + mb / a.mbs + a.compute_ms / 1000, 3)


def print_table(results):
    ideal = {r["epoch"]: r["samples_per_s"] for r in results.get("ideal", [])}
    direct = {r["epoch"]: r["samples_per_s"] for r in results.get("direct", [])}
    print("%-16s %5s %10s %8s %8s %7s %10s %6s %6s %6s %7s %8s %9s %9s %7s %6s" % (
        "run", "epoch", "samples/s", "x ideal", "x direct", "x floor", "daemon CPU", "hits",
        "misses", "waits", "stall", "1st copy", "pub->copy", "1st-s stall", "open", ">1 ms"))
    for name, rows in results.items():
        for r in rows:
            e = r["epoch"]
            print("%-16s %5d %10.0f %8s %8s %7s %10s %6s %6s %6s %7s %8s %9s %9s %7s %6s" % (
                name, e, r["samples_per_s"],
                "%.2f" % (r["samples_per_s"] / ideal[e]) if e in ideal else "-",
                "%.2f" % (r["samples_per_s"] / direct[e]) if e in direct else "-",
                "%.2f" % (r["link_floor_s"] / r["seconds"]) if "link_floor_s" in r else "-",
                "%.2f s" % r["daemon_cpu_s"] if "daemon_cpu_s" in r else "-",
                r.get("hits", "-"), r.get("misses", "-"), r.get("waits", "-"),
                "%.2f s" % r["stall_s"] if "stall_s" in r else "-",
                "%.3f s" % r["first_staged_s"] if r.get("first_staged_s") is not None else "-",
                "%.3f s" % r["publish_to_staged_s"]
                if r.get("publish_to_staged_s") is not None else "-",
                "%.2f s" % r["first_s_stall_s"] if "first_s_stall_s" in r else "-",
                "%d µs" % r["open_us"] if "open_us" in r else "-", r.get("slow_opens", "-")))
        staged, hit = cpu_per_file(rows)
        if hit is not None:
            print("%-16s daemon CPU per staged file %s µs, per hit %s µs" % (
                "", staged if staged is not None else "-", hit))


def run_all(a, dirs, served):
    slowfs = Daemon([os.path.join(a.build, "bin", "epochfs-slowfs"), served,
                    dirs["shared"], "--latency-ms", str(a.read_ms), "--open-latency-ms",
                    str(a.open_ms), "--bandwidth-mbs", str(a.mbs)], dirs["shared"])
    results = {}
    try:
        for name in a.runs.split(","):
            rows = run_one(a, name, dirs)
            add_link_floor(a, rows)
            results[name] = rows
            print("%s: %s" % (name, " ".join("%.0f" % r["samples_per_s"] for r in rows)),
                  file=sys.stderr, flush=True)
    finally:
        slowfs.stop()
    return results


def bench_main(a):
    work = a.dir or tempfile.mkdtemp(prefix="epochfs-dataloader-")
    dirs = {"work": work, "shared": os.path.join(work, "shared"), "local": work}
    os.makedirs(dirs["shared"], exist_ok=True)
    disk = LocalDisk(work, a.files * a.kb * 1000 * 4) if a.local_disk == "ext4-loop" else None
    served = None
    try:
        if disk:
            dirs["local"] = disk.mount
        dirs["data"] = os.path.join(dirs["local"], "data")
        if not os.path.isdir(os.path.join(dirs["data"], "train")):
            make_dataset(os.path.join(dirs["data"], "train"), a.files, a.kb, a.seed)
        served = dirs["data"]
        if not a.source_on_disk:
            served = tempfile.mkdtemp(prefix="epochfs-dataloader-source-", dir="/dev/shm")
            copy_tree(dirs["data"], served)
        results = run_all(a, dirs, served)
    finally:
        if served and served != dirs["data"]:
            shutil.rmtree(served, ignore_errors=True)
        if disk:
            disk.remove()
    print_table(results)
    if a.json:
        summary = {name: dict(zip(("cpu_us_per_staged_file", "cpu_us_per_hit"),
                                  cpu_per_file(rows))) for name, rows in results.items()}
        with open(a.json, "w") as f:
            json.dump({"options": vars(a), "epochs": results, "cpu": summary}, f, indent=2)
    if not a.dir and not a.keep:
        shutil.rmtree(work, ignore_errors=True)


RUNS = "ideal,direct,lru,copy-first,epochfs-classic,epochfs-auto"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/ci", help="the CMake build directory")
    ap.add_argument("--dir", help="work directory (default: a new temporary one, removed)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    ap.add_argument("--runs", default=RUNS, help="runs, in this order (default: %s)" % RUNS)
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--kb", type=float, default=100, help="mean file size in KB")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--compute-ms", type=float, default=20, help="emulated GPU time per batch")
    ap.add_argument("--open-ms", type=float, default=4, help="the source's time per open")
    ap.add_argument("--read-ms", type=float, default=0.4, help="the source's time per read")
    ap.add_argument("--mbs", type=float, default=300, help="the source's link in MB/s")
    ap.add_argument("--local-disk", choices=("ext4-loop", "here"), default="ext4-loop",
                    help="the node's local disk: dataset, copies and caches (see above)")
    ap.add_argument("--source-on-disk", action="store_true",
                    help="the source serves the local disk's copy, not one in memory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--order", choices=("ahead", "at-start"), default="ahead",
                    help="when the sampler's order exists: drawn ahead (a seeded generator) or "
                    "only at the epoch's start (RandomSampler without one)")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--mount-args", default="",
                    help="more options for the epochfs mounts, as one string")
    # The trainer process's own arguments.
    ap.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--daemon-pid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--copy-from", help=argparse.SUPPRESS)
    ap.add_argument("--data-root", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.trainer:
        trainer_main(a)
    else:
        a.build = os.path.abspath(a.build)
        bench_main(a)


if __name__ == "__main__":
    main()
