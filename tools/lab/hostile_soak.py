#!/usr/bin/python3
"""Hostile tenants beside a training job: what one user can make a shared mount's daemon spend.

Lab code (issue 34), not shipped. Standard library only; run as root with /usr/bin/python3: it
mounts with --allow-other and runs two ordinary users (uids 65533 and 65534, no entry in
/etc/passwd needed).

One run mounts a tree of --files files of --file-size bytes (kept between runs under
<dir>/src) with ``epochfs mount SRC MNT --allow-other --cache-dir <dir>/cache`` and runs, as
the victim (65533), a training job that publishes a shuffled order of every file and opens and
reads them in that order, over and over, timing each open. Phase by phase, the attacker (65534)
then does one thing for --seconds and stops:

- ``baseline``: nothing;
- ``upload``: writes new paths into one .epochfs/ upload and holds it open (until refused);
- ``streams``: publishes 5 jobs x 64 streams and stays alive (holding them);
- ``opens``: holds 5,000 opens of one file;
- ``repeats``: publishes one path 8 M times, and opens it in a loop;
- ``registry``: publishes orders of --missing distinct missing paths, job after job, each
  from a process that then exits (its job ends).

For each phase it reports the daemon's VmRSS at its end and its peak, the victim's opens and
their latency (median, 99th percentile, max) and whether every byte read matched, and what
the attacker was refused. --json writes everything. The mount is unmounted in a finally block.

Results: docs/benchmarks.md, "Hostile tenants beside a training job".
"""

import argparse
import json
import os
import random
import signal
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lab  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_EPOCHFS = os.path.join(REPO, "build", "ci", "bin", "epochfs")
VICTIM, ATTACKER = 65533, 65534


def make_tree(src, files, size):
    marker = os.path.join(src, ".hostile-%d-%d" % (files, size))
    if os.path.exists(marker):
        return
    os.makedirs(src, exist_ok=True)
    rng = random.Random(1)
    for i in range(files):
        with open(os.path.join(src, "f%05d" % i), "wb") as f:
            f.write(bytes([rng.randrange(256)]) * size)
    open(marker, "w").close()


def as_user(uid, fn, *args):
    """Runs fn(*args) as uid in a child; returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)  # killed as a group: a job's publishing child goes with it
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            fn(*args)
        finally:
            os._exit(0)
    return pid


def publish(mnt, text):
    """Writes one order; returns the errno of the first failure, or 0."""
    try:
        fd = os.open(os.path.join(mnt, ".epochfs", "order"), os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError as e:
        return e.errno
    err = 0
    try:
        data = text.encode()
        while data:
            data = data[os.write(fd, data[: 1 << 20]):]
    except OSError as e:
        err = e.errno
    try:
        os.close(fd)
    except OSError as e:
        err = err or e.errno
    return err


def victim(mnt, src, files, out_path, stop_path):
    """Trains until stop_path exists: each epoch publishes its order, then opens and reads it.
    Appends one line per open (phase-free: the parent cuts by time) to out_path."""
    names = ["f%05d" % i for i in range(files)]
    rng = random.Random(7)
    with open(out_path, "w") as out:
        epoch = 0
        while not os.path.exists(stop_path):
            rng.shuffle(names)
            publish(mnt, "#job train\n#epoch %d\n" % epoch + "\n".join(names) + "\n")
            for name in names:
                if os.path.exists(stop_path):
                    break
                start = time.monotonic()
                fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
                opened = time.monotonic()
                data = b""
                while True:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    data += chunk
                os.close(fd)
                with open(os.path.join(src, name), "rb") as f:
                    same = f.read() == data
                out.write("%.6f %.6f %d\n" % (start, opened - start, same))
            epoch += 1


def attack_upload(mnt, seconds):
    fd = os.open(os.path.join(mnt, ".epochfs", "big"), os.O_WRONLY | os.O_CREAT, 0o600)
    end = time.monotonic() + seconds
    refused, n = 0, 0
    while time.monotonic() < end:
        chunk = "".join("x" * 80 + "/%d\n" % (n + i) for i in range(700)).encode()
        n += 700
        try:
            os.write(fd, chunk)
        except OSError:
            refused += 1
            time.sleep(0.01)
    print(json.dumps({"upload_writes_refused": refused}), flush=True)
    time.sleep(1e6)  # held open until killed


def attack_streams(mnt, seconds):
    refused = sum(publish(mnt, "#job j%d\n#stream s%d\nf00000\n" % (j, s)) != 0
                  for j in range(5) for s in range(64))
    print(json.dumps({"streams_refused": refused}), flush=True)
    time.sleep(1e6)


def attack_opens(mnt, seconds):
    held, refused = [], 0
    for _ in range(5000):
        try:
            held.append(os.open(os.path.join(mnt, "f00001"), os.O_RDONLY))
        except OSError:
            refused += 1
    print(json.dumps({"opens_held": len(held), "opens_refused": refused}), flush=True)
    time.sleep(1e6)


def attack_repeats(mnt, seconds):
    err = publish(mnt, "#job rep\n" + "f00002\n" * 8_000_000)
    end = time.monotonic() + seconds
    opens = 0
    while time.monotonic() < end:
        os.close(os.open(os.path.join(mnt, "f00002"), os.O_RDONLY))
        opens += 1
    print(json.dumps({"repeat_publish_errno": err, "repeat_opens": opens}), flush=True)
    time.sleep(1e6)


def attack_registry(mnt, seconds, missing):
    # Each job from a process of its own that exits once it published: job after job ends.
    end = time.monotonic() + seconds
    jobs = 0
    while time.monotonic() < end:
        pid = os.fork()
        if pid == 0:
            code = publish(mnt, "#job miss%d\n" % jobs +
                           "".join("nope/%d/%d\n" % (jobs, i) for i in range(missing)))
            os._exit(0 if code == 0 else 1)
        os.waitpid(pid, 0)
        jobs += 1
    print(json.dumps({"registry_jobs": jobs}), flush=True)
    time.sleep(1e6)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def latency(lines, since, until):
    picked = [(float(d), s == "1") for t, d, s in (l.split() for l in lines)
              if since <= float(t) < until]
    if not picked:
        return {"opens": 0}
    ms = sorted(d * 1e3 for d, _ in picked)
    return {"opens": len(ms), "median_ms": round(statistics.median(ms), 3),
            "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 3), "max_ms": round(ms[-1], 3),
            "all_bytes_match": all(s for _, s in picked)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--epochfs", default=DEFAULT_EPOCHFS)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--file-size", type=int, default=16384)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--missing", type=int, default=200_000)
    ap.add_argument("--phases", default="baseline,upload,streams,opens,repeats,registry",
                    help="comma-separated phases to run, in their order")
    ap.add_argument("--json")
    a = ap.parse_args()
    root = os.path.abspath(a.dir)
    src, mnt = os.path.join(root, "src"), os.path.join(root, "mnt")
    make_tree(src, a.files, a.file_size)
    os.chmod(root, 0o755)
    daemon = lab.Daemon([a.epochfs, "mount", "-f", src, mnt, "--allow-other",
                         "--cache-dir", os.path.join(root, "cache")], mnt)
    pid = daemon.proc.pid
    out_path = os.path.join(root, "victim.log")
    stop_path = os.path.join(root, "stop")
    for p in (out_path, stop_path):
        if os.path.exists(p):
            os.unlink(p)
    os.chmod(root, 0o777)  # the victim writes its log there
    phases = []
    trainer = None
    try:
        trainer = as_user(VICTIM, victim, mnt, src, a.files, out_path, stop_path)
        time.sleep(a.seconds / 2)  # epoch 0 stages the cache
        attacks = {"baseline": None, "upload": attack_upload, "streams": attack_streams,
                   "opens": attack_opens, "repeats": attack_repeats,
                   "registry": lambda m, s: attack_registry(m, s, a.missing)}
        for name, attack in ((n, attacks[n]) for n in a.phases.split(",")):
            start, peak = time.monotonic(), 0
            child = as_user(ATTACKER, attack, mnt, a.seconds) if attack else None
            while time.monotonic() < start + a.seconds:
                peak = max(peak, rss_kib(pid))
                time.sleep(0.05)
            phase = {"phase": name, "rss_mib_end": round(rss_kib(pid) / 1024, 1),
                     "rss_mib_peak": round(peak / 1024, 1)}
            if child:
                os.killpg(child, signal.SIGKILL)
                os.waitpid(child, 0)
            with open(out_path) as f:
                phase["victim"] = latency(f.readlines(), start, start + a.seconds)
            doc = lab.stats(mnt)
            phase["uploads_over_limit"] = doc["prefetch"].get("uploads_over_limit")
            phase["publishes_over_limit"] = doc["prefetch"]["publishes_over_limit"]
            phase["files_known"] = doc["files_known"]
            phase["jobs_ended"] = doc["prefetch"].get("jobs_ended")
            phase["paths_released"] = doc.get("paths_released")
            phases.append(phase)
            print(json.dumps(phase), flush=True)
    finally:
        open(stop_path, "w").close()
        if trainer:
            os.waitpid(trainer, 0)
        daemon.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "phases": phases}, f, indent=1)


if __name__ == "__main__":
    main()
