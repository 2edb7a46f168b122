#!/usr/bin/python3
"""Multi-node benchmark: storage reads, stall and samples/s of N emulated nodes sharing one
storage, DistributedSampler's global shuffle against node-aware orders, beside a model.

Lab code (issue 22 item 2), not shipped. Run as root with Debian's /usr/bin/python3
(python3-torch) from the source tree: it uses the built epochfs and epochfs-slowfs binaries
(--build) and the Python package in tools/python.

The setup, all on this machine:

- the dataset: --files files of about --kb KB (random bytes, lognormal sizes) in --classes
  class folders under <dir>/data/train, kept and reused by later runs with the same --dir;
- the shared storage: one epochfs-slowfs serving <dir>/data at <dir>/shared, with --preset
  and any of --latency-ms, --max-inflight, --bandwidth-mbs over it (default nfs-1g with 2
  requests at once: a node's share of a busy server, so that storage is the bottleneck);
- --nodes nodes, each an epochfs mount of <dir>/shared with its own cache directory and
  ``--cache-size`` of (1 + --exchange) x (the dataset's size on disk) / nodes x (1 +
  --cache-margin): a node holds its part and the next epoch's arrivals, never the dataset.
  The margin covers parts larger than the mean on disk and copies being written: with 3%, the
  fullest node's part and next part filled 98% of its cache, and in two runs of four about
  20 opens per epoch missed and the storage served about 45 files per epoch more than with 5%
  (none missed after epoch 1 at 5%);
- --ranks-per-node ranks per node, each a trainer thread in this process: its sampler's
  indices in batches of --batch, each batch loaded by a pool of --workers loader threads
  (reading each file whole through the node's mount, 2 x workers batches in flight, as a
  DataLoader's prefetch), then --compute-ms of sleep (the GPU), then a barrier across all
  ranks: every step synchronises, as DistributedDataParallel's gradient all-reduce does;
- two scenarios one after the other, each on fresh mounts and empty caches, with the same
  seed: ``global`` (``epochfs.torch.DistributedPublishingSampler``, DistributedSampler's
  order) and ``node-aware`` (``epochfs.torch.NodeAwareSampler``, --exchange); both publish
  epoch 0 when made and epoch e + 1 at set_epoch(e).

Per epoch, over all nodes (each epoch starts as the one before ends, as in training, so an
epoch's figures count the staging ahead of the next that happened before it ended, and the
last epoch's the start of an epoch published ahead and never read):

- storage files: the opens epochfs-slowfs served (its getxattr counter), and the mounts'
  ``cache.files_staged``: a miss opens the source once, and the copy made after it reads
  through the miss's descriptor (no second open), so every file the storage served is one
  copy, and ``misses + files_staged`` would count each miss twice;
- storage MB: ``cache.bytes_staged`` over the mounts (the misses' own reads,
  ``bytes_from_source``, are of files those copies read too: in the JSON as miss_mb);
- the model's storage files for the epoch: ``global_known`` and ``node_aware`` of
  multinode_model.py (docs/benchmarks.md, "Many nodes: storage reads, modelled and
  simulated") for these files, nodes, epochs, exchange and the node cache in files (its size
  over the mean file's size on disk);
- hit rate (hits over opens through the mounts), stall (the share of the epoch the job was
  not computing: 1 - steps x compute / epoch time), samples/s, and the ceiling of samples/s
  with no stall.

Prints a table per epoch and a summary line; --json writes every figure. Every mount is
unmounted in a finally block. Results: docs/benchmarks.md, "Many nodes: a measured run".
"""

import argparse
import collections
import concurrent.futures
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

from lab import Daemon, stats
from multinode_model import global_known, node_aware

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

BLOCK = 4096  # the cache charges each copy its size rounded up to a block (docs/stats.md)


# The dataset and the daemons.


def make_dataset(work, files, kb, classes, seed):
    """The relative paths (``train/c<k>/f<i>.bin``, sorted: index = sample) and their sizes.
    Made under <work>/data unless a dataset of these parameters is there already."""
    data = os.path.join(work, "data")
    params = {"files": files, "kb": kb, "classes": classes, "seed": seed}
    marker = os.path.join(work, "dataset.json")
    try:
        with open(marker) as f:
            reuse = json.load(f) == params
    except (OSError, ValueError):
        reuse = False
    if not reuse:
        shutil.rmtree(data, ignore_errors=True)
        rng = random.Random(seed)
        for i in range(files):
            folder = os.path.join(data, "train", "c%d" % (i % classes))
            os.makedirs(folder, exist_ok=True)
            size = max(1024, int(rng.lognormvariate(0, 0.3) * kb * 1000 / 1.046))
            with open(os.path.join(folder, "f%06d.bin" % i), "wb") as f:
                f.write(rng.randbytes(size))
        with open(marker, "w") as f:
            json.dump(params, f)
    paths = sorted(os.path.relpath(os.path.join(d, n), data)
                   for d, _, names in os.walk(os.path.join(data, "train")) for n in names)
    if len(paths) != files:
        raise SystemExit("%s holds %d files, not %d: remove it" % (data, len(paths), files))
    return paths, [os.stat(os.path.join(data, p)).st_size for p in paths]


def storage_opens(shared):
    return int(os.getxattr(shared, "user.slowfs.opens"))


def counters(shared, mounts):
    """The figures a row is the difference of: slowfs's opens and the mounts' stats, summed."""
    out = collections.Counter(storage_opens=storage_opens(shared))
    for m in mounts:
        s = stats(m.mnt)
        c = s["cache"]
        out.update(opens=s["opens"], hits=s["hits"], misses=s["misses"],
                   bytes_from_source=s["bytes_from_source"], files_staged=c["files_staged"],
                   bytes_staged=c["bytes_staged"], evictions=c["evictions"],
                   bypassed=c["bypassed"], skipped_no_room=c["skipped_no_room"],
                   copies_dropped=c["copies_dropped"], copies_aborted=c["copies_aborted"],
                   stall_seconds=s["stall_seconds"])
    return out


# The trainer.


def read_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        n = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return n
            n += len(chunk)
    finally:
        os.close(fd)


def rank_epoch(a, epoch, sampler, paths, barrier, result):
    """One rank's epoch: batches loaded by a.workers threads ahead, compute, a barrier."""
    sampler.set_epoch(epoch)  # publishes epoch + 1 ahead
    order = list(iter(sampler))
    batches = [order[i:i + a.batch] for i in range(0, len(order), a.batch)]
    waited = 0.0
    with concurrent.futures.ThreadPoolExecutor(a.workers) as pool:
        load = lambda batch: sum(read_file(paths[i]) for i in batch)  # noqa: E731
        ahead = collections.deque(pool.submit(load, b) for b in batches[:2 * a.workers])
        following = 2 * a.workers
        for _ in batches:
            start = time.monotonic()
            ahead.popleft().result()
            waited += time.monotonic() - start
            if following < len(batches):
                ahead.append(pool.submit(load, batches[following]))
                following += 1
            time.sleep(a.compute_ms / 1000)
            barrier.wait(120)
    result.update(samples=len(order), steps=len(batches), waited=waited)


def run_epoch(a, epoch, samplers, rank_paths):
    ranks = len(samplers)
    barrier = threading.Barrier(ranks)
    results = [{} for _ in range(ranks)]
    errors = []

    def target(r):
        try:
            rank_epoch(a, epoch, samplers[r], rank_paths[r], barrier, results[r])
        except BaseException as e:  # the others must not wait at the barrier forever
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=target, args=(r,)) for r in range(ranks)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    if errors:
        raise errors[0]
    return seconds, results


def run_scenario(a, name, dirs, paths, cache_bytes):
    import epochfs.torch

    ranks = a.nodes * a.ranks_per_node
    mounts = []
    rows = []
    try:
        for k in range(a.nodes):
            mnt = os.path.join(dirs["work"], "node%d" % k)
            cache = os.path.join(dirs["work"], "cache-%s-%d" % (name, k))
            shutil.rmtree(cache, ignore_errors=True)
            mounts.append(Daemon([
                os.path.join(a.build, "bin", "epochfs"), "mount", "--foreground",
                dirs["shared"], mnt, "--cache-dir", cache, "--cache-size", str(cache_bytes),
                "--stage-threads", str(a.stage_threads), "--log-level", "warning"], mnt))
        before = counters(dirs["shared"], mounts)
        samplers, rank_paths = [], []
        for r in range(ranks):
            mnt = mounts[r // a.ranks_per_node].mnt
            rank_paths.append([os.path.join(mnt, p) for p in paths])
            common = dict(num_replicas=ranks, rank=r, shuffle=True, seed=a.seed,
                          data_dir=os.path.join(mnt, "train"), paths=rank_paths[r], strict=True)
            if name == "global":
                samplers.append(epochfs.torch.DistributedPublishingSampler(range(len(paths)),
                                                                           **common))
            else:
                samplers.append(epochfs.torch.NodeAwareSampler(
                    range(len(paths)), ranks_per_node=a.ranks_per_node,
                    exchange=a.exchange, **common))
        for epoch in range(a.epochs):
            seconds, results = run_epoch(a, epoch, samplers, rank_paths)
            after = counters(dirs["shared"], mounts)
            d = {k: after[k] - before[k] for k in after}
            before = after
            steps = results[0]["steps"]
            samples = sum(r["samples"] for r in results)
            rows.append({
                "epoch": epoch + 1, "seconds": round(seconds, 3), "samples": samples,
                "samples_per_s": round(samples / seconds, 1),
                "stall": round(max(0.0, 1 - steps * a.compute_ms / 1000 / seconds), 4),
                "rank_wait_s": round(sum(r["waited"] for r in results) / ranks, 3),
                "storage_files": d["storage_opens"],
                "storage_files_mounts": d["files_staged"],
                "storage_mb": round(d["bytes_staged"] / 1e6, 2),
                "miss_mb": round(d["bytes_from_source"] / 1e6, 2),
                "hit_rate": round(d["hits"] / d["opens"], 4) if d["opens"] else 0,
                **{k: d[k] for k in ("opens", "hits", "misses", "files_staged", "evictions",
                                     "bypassed", "skipped_no_room", "copies_dropped",
                                     "copies_aborted")},
                "daemon_stall_s": round(d["stall_seconds"], 3)})
            print("%s epoch %d: %d storage files, %.0f samples/s" % (
                name, epoch + 1, rows[-1]["storage_files"], rows[-1]["samples_per_s"]),
                file=sys.stderr, flush=True)
    finally:
        for m in reversed(mounts):
            m.stop()
        for k in range(a.nodes):
            shutil.rmtree(os.path.join(dirs["work"], "cache-%s-%d" % (name, k)),
                          ignore_errors=True)
    return rows


# Output.


def print_table(a, results, ceiling):
    print("%-10s %5s %13s %13s %7s %7s %10s %8s %6s %9s" % (
        "orders", "epoch", "storage files", "(mounts)", "model", "meas/mod", "storage MB",
        "hit rate", "stall", "samples/s"))
    for name, (rows, model) in results.items():
        for r, m in zip(rows, model):
            print("%-10s %5d %13d %13d %7.0f %7.2f %10.1f %8.3f %5.0f%% %9.0f" % (
                name, r["epoch"], r["storage_files"], r["storage_files_mounts"], m,
                r["storage_files"] / m if m else float("nan"), r["storage_mb"], r["hit_rate"],
                100 * r["stall"], r["samples_per_s"]))
    print("(samples/s with no stall: %.0f)" % ceiling)


def summary(a, results):
    totals = {name: sum(r["storage_files"] for r in rows) for name, (rows, _) in results.items()}
    models = {name: sum(model) for name, (_, model) in results.items()}
    line = "storage reads over %d epochs: %s" % (a.epochs, ", ".join(
        "%s %d files (%.2f datasets; model %.2f)" % (n, t, t / a.files, models[n] / a.files)
        for n, t in totals.items()))
    if totals.get("node-aware") and "global" in totals:
        line += "; global / node-aware %.2f (model %.2f)" % (
            totals["global"] / totals["node-aware"], models["global"] / models["node-aware"])
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/ci", help="the CMake build directory")
    ap.add_argument("--dir", help="work directory, kept with its dataset (default: a new "
                    "temporary one, removed)")
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--kb", type=float, default=16, help="mean file size in KB")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2, help="loader threads per rank")
    ap.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    ap.add_argument("--compute-ms", type=float, default=100, help="emulated GPU time per step")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--exchange", type=float, default=0.1)
    ap.add_argument("--cache-margin", type=float, default=0.05,
                    help="cache room beyond (1 + exchange) parts, as a fraction")
    ap.add_argument("--stage-threads", type=int, default=16, help="epochfs mount --stage-threads")
    ap.add_argument("--preset", default="nfs-1g", help="epochfs-slowfs --preset")
    ap.add_argument("--latency-ms", type=float)
    ap.add_argument("--max-inflight", type=int, default=2)
    ap.add_argument("--bandwidth-mbs", type=float)
    ap.add_argument("--scenarios", default="global,node-aware")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write every figure to this file")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if a.nodes < 2:
        raise SystemExit("--nodes must be at least 2")
    # SIGTERM unwinds through the finally blocks, which unmount.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    work = os.path.abspath(a.dir) if a.dir else tempfile.mkdtemp(prefix="epochfs-multinode-")
    dirs = {"work": work, "data": os.path.join(work, "data"),
            "shared": os.path.join(work, "shared")}
    os.makedirs(work, exist_ok=True)
    paths, sizes = make_dataset(work, a.files, a.kb, a.classes, a.seed)
    on_disk = sum(-(-s // BLOCK) * BLOCK for s in sizes)
    cache_bytes = int((1 + a.exchange) * on_disk / a.nodes * (1 + a.cache_margin))
    cache_files = cache_bytes / (on_disk / a.files)
    storage = [os.path.join(a.build, "bin", "epochfs-slowfs"), dirs["data"], dirs["shared"],
               "--preset", a.preset]
    for flag, value in (("--latency-ms", a.latency_ms), ("--max-inflight", a.max_inflight),
                        ("--bandwidth-mbs", a.bandwidth_mbs)):
        if value is not None:
            storage += [flag, str(value)]
    # The model counts reads per epoch as fractions of the dataset.
    models = {"global": global_known(a.files, a.nodes, cache_files, a.epochs) * a.files,
              "node-aware": node_aware(a.files, a.nodes, cache_files, a.epochs,
                                       a.exchange) * a.files}
    results = {}
    slowfs = Daemon(storage, dirs["shared"])
    try:
        for name in a.scenarios.split(","):
            results[name] = (run_scenario(a, name, dirs, paths, cache_bytes),
                             models[name])
    finally:
        slowfs.stop()
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    ceiling = a.nodes * a.ranks_per_node * a.batch / (a.compute_ms / 1000)
    print("%d files, %.1f MB (%.1f MB on disk); %d nodes x %d ranks; node cache %.1f MB "
          "(%.0f files, %.3f of the dataset)" % (
              a.files, sum(sizes) / 1e6, on_disk / 1e6, a.nodes, a.ranks_per_node,
              cache_bytes / 1e6, cache_files, cache_files / a.files))
    print_table(a, results, ceiling)
    line = summary(a, results)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"options": vars(a), "storage_argv": storage[1:],
                       "cache_bytes": cache_bytes, "cache_files": cache_files,
                       "dataset_bytes": sum(sizes), "samples_per_s_ceiling": ceiling,
                       "scenarios": {n: {"epochs": rows,
                                         "model_storage_files": [round(m, 1) for m in model]}
                                     for n, (rows, model) in results.items()},
                       "summary": line}, f, indent=2)


if __name__ == "__main__":
    main()
