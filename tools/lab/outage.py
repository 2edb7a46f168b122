#!/usr/bin/python3
"""Outage benchmark: what a mount serves while its shared storage is dead, and how it recovers.

Lab code (issue 27), not shipped. Standard library only; run as root with /usr/bin/python3
(drop_caches). Uses the built epochfs and epochfs-faultfs binaries (--build).

One run:

1. makes --files files of --file-size bytes under <dir>/data, serves them through
   epochfs-faultfs at <dir>/faulty (the "shared storage"), and mounts epochfs over that with
   ``--attr-timeout 1 --outage-wait W``;
2. reads the first half of the files (they are copied into the cache) and waits until the
   copies are made;
3. kills the faultfs daemon (its mount answers ENOTCONN, as a dead network client's), drops
   the page cache, and reads every cached file, comparing it with <dir>/data: how many were
   served, and in how long;
4. reads one uncached file: how long until it fails, and with which errno;
5. publishes an order of the second half while the source is dead, then mounts faultfs again
   where it was (a restarted client) and measures how long until the daemon sees the source
   again and until the order's window ahead of the (not yet started) trainer is cached: the
   catch-up.

Prints one JSON document. Results: docs/benchmarks.md, "Surviving a source outage".
"""

import argparse
import errno
import json
import os
import signal
import subprocess
import time

from lab import stats, wait_for


def start_faultfs(build, data, faulty):
    proc = subprocess.Popen([os.path.join(build, "bin", "epochfs-faultfs"), data, faulty])
    if not wait_for(lambda: os.path.ismount(faulty), 20):
        raise SystemExit("faultfs did not mount")
    return proc


def caught_up(doc, cached_before):
    # The trainer has not started the order: staging stops at the stream's window ahead.
    streams = list(doc["prefetch"]["streams"].values())
    window = streams[0]["window_files"] if streams else 0
    return window > 0 and doc["cache"]["files_cached"] >= cached_before + window


def read_same(path, original):
    try:
        with open(path, "rb") as f:
            return f.read() == original
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="work directory (made if missing)")
    ap.add_argument("--build", required=True, help="the CMake build directory")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--file-size", type=int, default=110_000)
    ap.add_argument("--outage-wait", type=float, default=5)
    args = ap.parse_args()

    data, faulty, mnt = (os.path.join(args.dir, d) for d in ("data", "faulty", "mnt"))
    for d in (data, faulty, mnt):
        os.makedirs(d, exist_ok=True)
    names = ["f%05d" % i for i in range(args.files)]
    content = {}
    for n in names:
        content[n] = os.urandom(args.file_size)
        with open(os.path.join(data, n), "wb") as f:
            f.write(content[n])
    half = names[: args.files // 2]
    rest = names[args.files // 2:]
    epochfs = os.path.join(args.build, "bin", "epochfs")
    faults = start_faultfs(args.build, data, faulty)
    subprocess.run([epochfs, "mount", faulty, mnt, "--cache-dir", os.path.join(args.dir, "cache"),
                    "--attr-timeout", "1", "--outage-wait", str(args.outage_wait)], check=True)
    result = {"files_cached_before": 0}
    try:
        for n in half:
            read_same(os.path.join(mnt, n), content[n])
        wait_for(lambda: stats(mnt)["cache"]["files_cached"] >= len(half), 120)
        result["files_cached_before"] = stats(mnt)["cache"]["files_cached"]

        faults.send_signal(signal.SIGKILL)
        faults.wait()
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        time.sleep(1.2)  # past the attribute timeout: the source is asked again
        start = time.monotonic()
        served = sum(read_same(os.path.join(mnt, n), content[n]) for n in half)
        result["cached_served_during_outage"] = served
        result["cached_read_seconds"] = round(time.monotonic() - start, 3)

        start = time.monotonic()
        try:
            open(os.path.join(mnt, rest[0]), "rb").read()
            result["uncached_read"] = "served"
        except OSError as e:
            result["uncached_read"] = errno.errorcode.get(e.errno, str(e.errno))
        result["uncached_fail_seconds"] = round(time.monotonic() - start, 3)

        with open(os.path.join(mnt, ".epochfs", "order"), "w") as f:
            f.write("\n".join(rest) + "\n")
        subprocess.run(["umount", "-l", faulty], check=True)
        start = time.monotonic()
        faults = start_faultfs(args.build, data, faulty)
        wait_for(lambda: stats(mnt)["source_health"]["state"] != "down", 120)
        result["source_back_seconds"] = round(time.monotonic() - start, 3)
        wait_for(lambda: caught_up(stats(mnt), len(half)), 300)
        result["catch_up_seconds"] = round(time.monotonic() - start, 3)
        result["files_cached_after"] = stats(mnt)["cache"]["files_cached"]
        result["source_health"] = stats(mnt)["source_health"]
    finally:
        subprocess.run([epochfs, "unmount", mnt])
        faults.send_signal(signal.SIGTERM)
        subprocess.run(["umount", "-l", faulty], stderr=subprocess.DEVNULL)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
