#!/usr/bin/python3
"""Soak benchmark: does a long-lived mount's memory come back when jobs end?

Lab code (issue 21 item 4), not shipped. Standard library only; run as root with
/usr/bin/python3 (the drop_caches step needs root, the rest does not).

What it does, in one run:

1. makes a tree of --files small files (--file-size bytes each) in --dirs directories under
   <dir>/src (kept between runs), and mounts it with
   ``epochfs mount SRC MNT --cache-dir D --cache-size 64M --negative-timeout T
   --max-entries-per-user L`` plus any --mount-arg;
2. records the daemon's memory before anything (VmRSS, RssAnon from /proc/<pid>/status);
3. runs --jobs jobs one after another. Each is a child process (``soak.py _publish ...``)
   that publishes epoch 0 and epoch 1 of a shuffled order of every file in the tree
   (``#job soak-<i>``, ``#stream rank0``, ``#count``) and exits, which ends the job. Every
   10th job has its epoch 1 refused, alternately by a wrong ``#count`` (one more than the
   lines sent: the "cut short" refusal) and by the per-user entry limit (its epoch 1 lists
   every file twice, so the job's entries, 3 x files, pass ``--max-entries-per-user``, set
   to 2.5 x files, which the other jobs' 2 x files stay under). After each child exits the
   parent waits until the daemon's stats show the job ended;
4. stats --lookups distinct names that do not exist (``dNN/nope-<i>``) through the mount;
5. writes 2 to /proc/sys/vm/drop_caches (the kernel forgets its dentries and inodes, which
   tells the daemon to forget its inode records) and waits --settle seconds.
6. with --malloc-trim, makes the daemon call malloc_trim(0) through gdb and samples once
   more (a diagnostic: what that gives back was freed memory that glibc kept).

Memory and the daemon's counters are sampled at each point, the peak during the jobs by a
thread reading /proc every 20 ms (and VmHWM). Prints a table; --json writes everything,
including the figures after every job and every tenth of the lookups. The mount is unmounted
in a finally block. The daemon inherits this script's environment, so e.g.
``MALLOC_ARENA_MAX=1 soak.py ...`` shows what glibc's per-thread arenas keep.

Results and their reading: docs/benchmarks.md, "Memory of a long-lived mount (soak)".
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

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_EPOCHFS = os.path.join(REPO, "build", "ci", "bin", "epochfs")


def tree_paths(files, dirs):
    """The tree's relative paths, in a fixed order (children regenerate them too)."""
    return ["d%02d/f%06d.bin" % (i % dirs, i) for i in range(files)]


def make_tree(src, files, dirs, size):
    marker = os.path.join(src, ".soak-tree-%d-%d-%d" % (files, dirs, size))
    if os.path.exists(marker):
        return False
    if os.path.exists(src):
        shutil.rmtree(src)
    for d in range(dirs):
        os.makedirs(os.path.join(src, "d%02d" % d))
    payload = bytes(size)
    for i, rel in enumerate(tree_paths(files, dirs)):
        with open(os.path.join(src, rel), "wb") as f:
            f.write(payload)
    with open(marker, "w") as f:
        f.write("soak tree\n")
    return True


# ---------------------------------------------------------------- the child: one job


def publish_one(ctl, name, header, lines, count):
    """Writes one order into the control dir; returns None or the refusal's errno text."""
    text = "".join("#%s %s\n" % kv for kv in header)
    text += "#count %d\n" % count
    text += "\n".join(lines) + "\n"
    try:
        with open(os.path.join(ctl, name), "w") as f:
            f.write(text)
        return None
    except OSError as e:
        return "%s (%s)" % (os.strerror(e.errno), e.errno)


def child_main(argv):
    ap = argparse.ArgumentParser(prog="soak.py _publish")
    ap.add_argument("mount")
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--files", type=int, required=True)
    ap.add_argument("--dirs", type=int, required=True)
    ap.add_argument("--refuse", choices=["none", "count", "limit"], default="none")
    a = ap.parse_args(argv)
    ctl = os.path.join(a.mount, ".epochfs")
    paths = tree_paths(a.files, a.dirs)
    rng = random.Random(a.job)
    result = {}
    for epoch in (0, 1):
        order = paths[:]
        rng.shuffle(order)
        count = len(order)
        if epoch == 1 and a.refuse == "count":
            count += 1                      # one line "missing": refused as cut short
        elif epoch == 1 and a.refuse == "limit":
            order = order + order           # 2 x files entries: the job passes the limit
            count = len(order)
        header = [("job", "soak-%d" % a.job), ("stream", "rank0"), ("epoch", str(epoch))]
        err = publish_one(ctl, "soak-%d-e%d" % (a.job, epoch), header, order, count)
        result["epoch%d" % epoch] = "accepted" if err is None else "refused: " + err
    print(json.dumps(result))
    return 0


# ---------------------------------------------------------------- the parent


def read_status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024     # kB -> bytes
            elif key == "Threads":
                out[key] = int(rest)
    return out


class Sampler(threading.Thread):
    """Reads VmRSS every 20 ms while running; keeps the peak."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.samples = 0
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            try:
                rss = read_status(self.pid)["VmRSS"]
            except (OSError, KeyError):
                return
            self.peak = max(self.peak, rss)
            self.samples += 1
            self.stop_event.wait(0.02)

    def stop(self):
        self.stop_event.set()
        self.join()


def read_stats(mnt):
    with open(os.path.join(mnt, ".epochfs", "stats")) as f:
        return json.load(f)


def snapshot(label, pid, mnt, extra=None):
    st = read_stats(mnt)
    pf = st["prefetch"]
    mem = read_status(pid)
    row = {
        "point": label,
        "vm_rss": mem["VmRSS"],
        "rss_anon": mem.get("RssAnon"),
        "rss_file": mem.get("RssFile"),
        "vm_hwm": mem["VmHWM"],
        "threads": mem.get("Threads"),
        "files_known": st["files_known"],
        "inodes": st.get("inodes"),
        "jobs": pf["jobs"],
        "jobs_ended": pf["jobs_ended"],
        "schedule_entries": pf["schedule_entries"],
        "schedule_bytes": pf["schedule_bytes"],
        "manifest_entries": pf.get("manifest_entries"),
        "publishes": pf["publishes"],
        "publish_failures": pf["publish_failures"],
        "publishes_over_limit": pf["publishes_over_limit"],
        "files_cached": st.get("cache", {}).get("files_cached"),
    }
    if extra:
        row.update(extra)
    return row


def wait_job_ended(mnt, ended_before, timeout):
    """Waits until no job is left and jobs_ended has moved past ended_before (if it must)."""
    deadline = time.monotonic() + timeout
    while True:
        pf = read_stats(mnt)["prefetch"]
        if pf["jobs"] == 0 and pf["jobs_ended"] > ended_before:
            return pf, True
        if time.monotonic() > deadline:
            return pf, False
        time.sleep(0.05)


def mib(b):
    return "-" if b is None else "%.1f" % (b / 1048576.0)


def print_table(rows, peak):
    cols = ["point", "VmRSS MiB", "RssAnon MiB", "files_known", "inodes",
            "schedule_entries", "files_cached", "jobs", "jobs_ended"]
    print("| " + " | ".join(cols) + " |")
    print("| " + " | ".join("---" for _ in cols) + " |")
    for r in rows:
        vals = [r["point"], mib(r["vm_rss"]), mib(r["rss_anon"]), str(r["files_known"]),
                str(r["inodes"]), str(r["schedule_entries"]), str(r["files_cached"]), str(r["jobs"]),
                str(r["jobs_ended"])]
        print("| " + " | ".join(vals) + " |")
    print("peak VmRSS during the jobs: %s MiB (sampled every 20 ms), VmHWM %s MiB"
          % (mib(peak["sampled"]), mib(peak["vm_hwm"])))


def parent_main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="work dir (default: a new temp dir, removed at the end)")
    ap.add_argument("--epochfs", default=DEFAULT_EPOCHFS, help="the epochfs binary")
    ap.add_argument("--files", type=int, default=100000)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--file-size", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--refuse-every", type=int, default=10,
                    help="every Nth job has its epoch 1 refused (0: none)")
    ap.add_argument("--lookups", type=int, default=1000000)
    ap.add_argument("--negative-timeout", type=float, default=0.0,
                    help="the mount's --negative-timeout (0: every missing lookup reaches the daemon)")
    ap.add_argument("--cache-size", default="64M")
    ap.add_argument("--mount-arg", action="append", default=[],
                    help="extra argument for epochfs mount (repeat; use --mount-arg=--opt)")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds to wait after drop_caches")
    ap.add_argument("--job-timeout", type=float, default=30.0)
    ap.add_argument("--malloc-trim", action="store_true",
                    help="at the end, make the daemon call malloc_trim(0) through gdb and "
                    "sample once more: what it gives back was freed memory glibc kept")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args(argv)

    temp = a.dir is None
    work = tempfile.mkdtemp(prefix="epochfs-soak-") if temp else os.path.abspath(a.dir)
    src = os.path.join(work, "src")
    mnt = os.path.join(work, "mnt")
    cache = os.path.join(work, "cache")
    os.makedirs(mnt, exist_ok=True)
    os.makedirs(cache, exist_ok=True)
    t0 = time.monotonic()
    made = make_tree(src, a.files, a.dirs, a.file_size)
    print("tree: %d files of %d bytes in %d dirs at %s (%s, %.1f s)"
          % (a.files, a.file_size, a.dirs, src, "made" if made else "reused",
             time.monotonic() - t0), flush=True)

    limit = a.files * 5 // 2
    mount_cmd = [a.epochfs, "mount", src, mnt, "--cache-dir", cache,
                 "--cache-size", a.cache_size,
                 "--negative-timeout", repr(a.negative_timeout),
                 "--max-entries-per-user", str(limit)] + a.mount_arg
    print("mount: " + " ".join(mount_cmd), flush=True)
    subprocess.run(mount_cmd, check=True)
    result = {"config": vars(a), "mount_command": mount_cmd, "work_dir": work,
              "max_entries_per_user": limit, "rows": [], "per_job": [], "jobs": []}
    rows = result["rows"]
    try:
        pid = read_stats(mnt)["pid"]
        result["daemon_pid"] = pid
        rows.append(snapshot("before", pid, mnt))

        sampler = Sampler(pid)
        sampler.start()
        t_jobs = time.monotonic()
        for i in range(a.jobs):
            refuse = "none"
            if a.refuse_every and i % a.refuse_every == a.refuse_every - 1:
                refuse = "count" if (i // a.refuse_every) % 2 == 0 else "limit"
            ended_before = read_stats(mnt)["prefetch"]["jobs_ended"]
            cmd = [sys.executable, os.path.abspath(__file__), "_publish", mnt,
                   "--job", str(i), "--files", str(a.files), "--dirs", str(a.dirs),
                   "--refuse", refuse]
            t = time.monotonic()
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            child = json.loads(out)
            t_exit = time.monotonic()
            pf, ok = wait_job_ended(mnt, ended_before, a.job_timeout)
            if not ok:
                raise RuntimeError("job soak-%d did not end within %.0f s: %s"
                                   % (i, a.job_timeout, json.dumps(pf)[:400]))
            want = {"none": ("accepted", "accepted")}.get(refuse, ("accepted", "refused"))
            got = (child["epoch0"].split(":")[0], child["epoch1"].split(":")[0])
            if got != want:
                raise RuntimeError("job soak-%d (%s): expected %s, got %s"
                                   % (i, refuse, want, child))
            rec = {"job": i, "refuse": refuse, "child": child,
                   "publish_s": round(t_exit - t, 3),
                   "end_wait_s": round(time.monotonic() - t_exit, 3),
                   "last_publish": pf.get("last_publish", {}) and
                   pf["last_publish"].get("message")}
            result["jobs"].append(rec)
            result["per_job"].append(snapshot("after job %d" % (i + 1), pid, mnt))
            if i == 0:
                rows.append(snapshot("after job 1", pid, mnt))
            if (i + 1) % 10 == 0:
                r = result["per_job"][-1]
                print("  job %3d: VmRSS %s MiB, files_known %d, schedule_entries %d, "
                      "jobs_ended %d" % (i + 1, mib(r["vm_rss"]), r["files_known"],
                                         r["schedule_entries"], r["jobs_ended"]), flush=True)
        sampler.stop()
        jobs_s = time.monotonic() - t_jobs
        peak = {"sampled": sampler.peak, "samples": sampler.samples,
                "vm_hwm": read_status(pid)["VmHWM"]}
        result["peak_during_jobs"] = peak
        result["jobs_seconds"] = round(jobs_s, 1)
        rows.append(snapshot("after %d jobs" % a.jobs, pid, mnt,
                             {"peak_vm_rss": peak["sampled"]}))
        print("jobs: %d in %.1f s; peak VmRSS %s MiB" % (a.jobs, jobs_s, mib(peak["sampled"])),
              flush=True)

        t_look = time.monotonic()
        found = 0
        step = max(1, a.lookups // 10)
        result["lookup_progress"] = []
        for i in range(a.lookups):
            try:
                os.stat(os.path.join(mnt, "d%02d" % (i % a.dirs), "nope-%d" % i))
                found += 1
            except FileNotFoundError:
                pass
            if (i + 1) % step == 0:
                result["lookup_progress"].append(
                    {"lookups": i + 1, "vm_rss": read_status(pid)["VmRSS"],
                     "rss_anon": read_status(pid).get("RssAnon")})
        look_s = time.monotonic() - t_look
        result["lookups_seconds"] = round(look_s, 1)
        result["lookups_found"] = found
        rows.append(snapshot("after %d missing lookups" % a.lookups, pid, mnt))
        print("lookups: %d in %.1f s (%.0f/s), %d found" % (a.lookups, look_s,
              a.lookups / look_s if look_s else 0, found), flush=True)
        print("  VmRSS MiB every %d lookups: %s" % (step, " ".join(
            mib(p["vm_rss"]) for p in result["lookup_progress"])), flush=True)

        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2\n")
            dropped = True
        except OSError as e:
            print("drop_caches: %s (not root?)" % e, flush=True)
            dropped = False
        time.sleep(a.settle)
        rows.append(snapshot("after drop_caches + %gs" % a.settle if dropped
                             else "after %gs (no drop_caches)" % a.settle, pid, mnt))

        if a.malloc_trim:
            # /proc/PID/exe: the binary may have been rebuilt (replaced) since the mount.
            gdb = subprocess.run(["gdb", "/proc/%d/exe" % pid, "-p", str(pid), "-batch",
                                  "-ex", "call (int)malloc_trim(0)"],
                                 capture_output=True, text=True)
            result["malloc_trim_output"] = gdb.stdout[-300:] + gdb.stderr[-300:]
            if "$1 = " in gdb.stdout:
                time.sleep(1)
                rows.append(snapshot("after malloc_trim(0) (gdb)", pid, mnt))
            else:
                print("malloc_trim through gdb failed:\n" + result["malloc_trim_output"],
                      flush=True)

        print()
        print_table(rows, peak)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(result, f, indent=1)
        return 0
    finally:
        subprocess.run([a.epochfs, "unmount", mnt])
        if temp:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_publish":
        sys.exit(child_main(sys.argv[2:]))
    sys.exit(parent_main(sys.argv[1:]))
