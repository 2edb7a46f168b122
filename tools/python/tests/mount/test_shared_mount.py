"""A mount shared by a node's jobs and users (docs/semantics.md, "A mount shared by jobs and
users"), end to end: real mounts made by root with --allow-other, and training jobs run as
ordinary users in subprocesses (this Python, torch's DataLoader over an ImageFolder, the
samplers of epochfs.torch), as an operator's node runs them.

Needs root (to mount for other users and to run jobs as them). The users epochfs-test-a and
epochfs-test-b are created (useradd --system) if missing and left in place. The dataset, the
scripts and a copy of the epochfs package live in a directory every user can read.

Every assertion is on events the daemon counts (stats) or on what the jobs print; waits are
bounded polls for a state, never timings.
"""

import json
import os
import pwd
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import pytest

import epochfs

pytest.importorskip("torch")
pytest.importorskip("torchvision")

from conftest import BINARY, Mount, make_images  # noqa: E402

USERS = ("epochfs-test-a", "epochfs-test-b")
TRAIN_FILES = 120
VAL_FILES = 24
# Hang guards only (a job that never answers fails the test instead of stalling ctest).
LINE_TIMEOUT = 120
# The daemon checks every second whether a job's processes exited.
JOB_END_TIMEOUT = 10
# DataLoader workers open a batch's files out of order: near an epoch's end, an open may be
# counted in the next epoch (or, once the stream moved on, in no epoch).
EDGE = 8

# A training job. sys.argv[1] is a JSON object:
#   loaders: [{data, sampler: distributed|random|sequential, seed, replicas, step}]
#            (step: the dataset is every step-th sample of the ImageFolder, a Subset)
#   epochs: epochs to train
#   wait_go: print {"ready": ...} once the samplers exist, then wait for a line on stdin
#   pause_after: after that many epochs, print {"paused": ...} and wait for a line on stdin
#   block: "publish": publish epochs 0 and 1 (ahead) of every loader;
#          "batch": also read the first batch of epoch 0 (DataLoader workers running); then
#          print {"blocked": <samples read>} and wait for stdin to close
#   hold: after training, print the result, then wait for stdin to close
# Each loader's indices are checked against the plain torch sampler of the same seed: the
# exit status is 3 if any epoch read another order. Every warning is shown (not just the
# first from each place), so that "exactly one" can be counted on stderr.
TRAIN_SCRIPT = r'''
import json
import os
import sys
import warnings

warnings.simplefilter("always")

import torch
import torchvision
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler, SequentialSampler

import epochfs
import epochfs.torch

args = json.loads(sys.argv[1])


def read_path(path):
    with open(path, "rb") as f:
        f.read()
    return path


def make(spec):
    data = spec["data"]
    ds = torchvision.datasets.ImageFolder(data, loader=read_path)
    if spec.get("step", 1) > 1:
        ds = torch.utils.data.Subset(ds, range(0, len(ds), spec["step"]))
    paths = epochfs.torch.dataset_paths(ds)
    seed = spec.get("seed", 0)
    if spec["sampler"] == "distributed":
        kw = dict(num_replicas=spec.get("replicas", 1), rank=0, seed=seed)
        ours = epochfs.torch.DistributedPublishingSampler(ds, data_dir=data, **kw)
        plain = DistributedSampler(ds, **kw)
    elif spec["sampler"] == "random":
        def draw():
            return RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
        ours = epochfs.torch.PublishingSampler(draw(), data, paths)
        plain = draw()
    else:
        ours = epochfs.torch.PublishingSampler(SequentialSampler(ds), data, paths)
        plain = SequentialSampler(ds)
    # Parallel workers open out of order; more than the CPUs would make torch warn.
    workers = min(2, len(os.sched_getaffinity(0)))
    loader = DataLoader(ds, sampler=ours, batch_size=8, num_workers=workers)
    return dict(data=data, paths=paths, ours=ours, plain=plain, loader=loader,
                index={p: i for i, p in enumerate(paths)})


def say(**fields):
    print(json.dumps(fields), flush=True)


loaders = [make(spec) for spec in args["loaders"]]
if args.get("wait_go"):
    say(ready=True)
    sys.stdin.readline()
if args.get("block") == "publish":
    for l in loaders:
        if isinstance(l["ours"], DistributedSampler):
            l["ours"].set_epoch(0)
        else:
            iter(l["ours"])
    say(blocked=0)
    sys.stdin.read()
    sys.exit(0)
if args.get("block") == "batch":
    batches = iter(loaders[0]["loader"])
    first, _ = next(batches)
    say(blocked=len(first))
    sys.stdin.read()
    sys.exit(0)

status = 0
for epoch in range(args["epochs"]):
    if epoch == args.get("pause_after"):
        say(paused=epoch)
        sys.stdin.readline()
    for l in loaders:
        if isinstance(l["ours"], DistributedSampler):
            l["ours"].set_epoch(epoch)
            l["plain"].set_epoch(epoch)
        got = [l["index"][p] for batch, _ in l["loader"] for p in batch]
        if got != list(l["plain"]):
            print("epoch %d of %s read another order than the plain sampler"
                  % (epoch, l["data"]), file=sys.stderr)
            status = 3
say(job=epochfs.job_id(), uid=os.getuid(),
    streams=[l["ours"].stream for l in loaders],
    publish_failures=[l["ours"].publish_failures for l in loaders])
if args.get("hold"):
    sys.stdin.read()
sys.exit(status)
'''


class User:
    def __init__(self, name):
        pw = pwd.getpwnam(name)
        self.name, self.uid, self.gid = name, pw.pw_uid, pw.pw_gid


def ensure_user(name):
    try:
        return User(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or shutil.which("useradd", path="/usr/sbin:/sbin")
    if useradd is None:
        pytest.skip("useradd is not available to create the test user %s" % name)
    done = subprocess.run([useradd, "--system", "--no-create-home", "--shell",
                           "/usr/sbin/nologin", name], capture_output=True, text=True)
    try:
        return User(name)  # also when a concurrent run created it first
    except KeyError:
        pytest.skip("useradd could not create %s: %s" % (name, done.stderr.strip()))


@pytest.fixture(scope="module")
def users():
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts for other users (--allow-other) and jobs run as them")
    return [ensure_user(name) for name in USERS]


def traversable_tmp():
    """A temporary directory whose every ancestor other users may pass."""
    base = os.path.realpath(tempfile.gettempdir())
    path = base
    while path != os.path.dirname(path):
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return "/tmp"
        path = os.path.dirname(path)
    return base


def open_to_all(root):
    """chmod a+rX below root: mkdtemp and the tests' umask may leave things private."""
    for top, dirs, files in os.walk(root):
        os.chmod(top, os.stat(top).st_mode | 0o755)
        for name in files:
            path = os.path.join(top, name)
            os.chmod(path, os.stat(path).st_mode | 0o444)


class Site:
    """What the jobs share: the dataset (src/train, src/val), the script, the package."""

    def __init__(self, root, users):
        self.root = root
        self.source = os.path.join(root, "src")
        make_images(os.path.join(self.source, "train"), files=TRAIN_FILES)
        make_images(os.path.join(self.source, "val"), files=VAL_FILES)
        self.python_path = os.path.join(root, "python")
        # The package under test (the installed one), readable by the other users.
        shutil.copytree(os.path.dirname(os.path.abspath(epochfs.__file__)),
                        os.path.join(self.python_path, "epochfs"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        self.script = os.path.join(root, "train.py")
        with open(self.script, "w") as f:
            f.write(TRAIN_SCRIPT)
        open_to_all(root)
        # A home of its own for each user (torch may look for ~/.cache).
        self.homes = {}
        for user in users:
            home = os.path.join(root, "home-" + user.name)
            os.mkdir(home, 0o700)
            os.chown(home, user.uid, user.gid)
            self.homes[user.name] = home
        self.counter = 0

    def path(self, prefix):
        self.counter += 1
        return os.path.join(self.root, "%s-%d" % (prefix, self.counter))


@pytest.fixture(scope="module")
def site(users):
    root = tempfile.mkdtemp(prefix="epochfs-shared-", dir=traversable_tmp())
    try:
        yield Site(root, users)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def slowfs_binary():
    near = os.path.join(os.path.dirname(BINARY), "epochfs-slowfs")
    return near if os.path.dirname(BINARY) and os.access(near, os.X_OK) else \
        shutil.which("epochfs-slowfs")


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


@pytest.fixture(scope="module")
def slow_source(site):
    """The dataset behind epochfs-slowfs: every open and read of the source takes 20 ms, as
    on shared storage, so that only files staged ahead of the trainer are hits."""
    binary = slowfs_binary()
    if binary is None:
        pytest.skip("epochfs-slowfs is not built next to EPOCHFS_BINARY")
    path = os.path.join(site.root, "slow")
    os.mkdir(path)
    log = open(os.path.join(site.root, "slowfs.log"), "w")
    proc = subprocess.Popen([binary, site.source, path, "--latency-ms", "20"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        for _ in range(1000):
            if mounted(path) or proc.poll() is not None:
                break
            time.sleep(0.01)
        assert mounted(path), "epochfs-slowfs did not mount (exit %s)" % proc.poll()
        yield path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # libfuse's handler unmounts and exits
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if mounted(path):
            subprocess.run(["umount", "-l", path])
        log.close()


class Job:
    """A training script run as ``user`` in ``job`` (EPOCHFS_JOB), in a session of its own."""

    def __init__(self, site, user, job, args):
        self.user = user
        self.stderr_path = site.path("stderr")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": site.homes[user.name],
            "PYTHONPATH": site.python_path,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if job is not None:
            env["EPOCHFS_JOB"] = job
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, site.script, json.dumps(args)], user=user.uid, group=user.gid,
                extra_groups=[], env=env, cwd=site.homes[user.name], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        self.buffer = b""

    def line(self):
        """The next JSON line the script prints."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + LINE_TIMEOUT
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError("the job printed nothing for %d s; stderr:\n%s"
                                     % (LINE_TIMEOUT, self.stderr()))
            piece = os.read(fd, 65536)
            if not piece:
                raise AssertionError("the job exited (status %s) before printing; stderr:\n%s"
                                     % (self.proc.wait(), self.stderr()))
            self.buffer += piece
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def go(self):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def finish(self):
        """Lets a holding job end; its exit status."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        return self.proc.wait(LINE_TIMEOUT)

    def stderr(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()

    def kill(self):
        """SIGKILL to the script's process group (it and its DataLoader workers, also when
        the script itself is gone already), reaped."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass  # stuck on a mount: Lab.close unmounts it, then waits again


class Lab:
    """The test's mounts and jobs; at the end every job is killed, then every mount is
    unmounted, also when the test failed."""

    def __init__(self, site, users):
        self.site = site
        self.a, self.b = users
        self.mounts = []
        self.jobs = []

    def mount(self, source=None, *options):
        m = Mount(source or self.site.source, self.site.path("mnt"), self.site.path("cache"),
                  ("--allow-other",) + options)
        self.mounts.append(m)
        return m

    def run(self, user, job, **args):
        j = Job(self.site, user, job, args)
        self.jobs.append(j)
        return j

    def close(self):
        for j in self.jobs:
            j.kill()
        for m in self.mounts:
            m.unmount()
        for j in self.jobs:
            try:
                j.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def lab(site, users):
    lab = Lab(site, users)
    try:
        yield lab
    finally:
        lab.close()


class Pairs(dict):
    """A JSON object that also keeps its members in order, repeated names included."""

    def __init__(self, pairs):
        super().__init__(pairs)
        self.pairs = pairs


def stats(mount):
    with open(os.path.join(mount.path, ".epochfs", "stats"), encoding="utf-8") as f:
        return json.load(f, object_pairs_hook=Pairs)


def streams(mount):
    return stats(mount)["prefetch"]["streams"]


def key(user, job, stream):
    return "%d/%s/%s" % (user.uid, job, stream)


def epoch_record(stream, epoch):
    """The stream's newest record of ``epoch``: its current epoch, or the last finished one
    (after a restart, a stream may have finished the same epoch number twice)."""
    if stream["this_epoch"]["epoch"] == epoch and stream["this_epoch"]["opens"] > 0:
        return stream["this_epoch"]
    found = [r for _, r in stream["finished_epochs"].pairs if r["epoch"] == epoch]
    assert found, "no record of epoch %d in %s" % (epoch, json.dumps(stream))
    return found[-1]


def wait_for(what, check):
    """Polls check() (at most JOB_END_TIMEOUT seconds) until it is true; its last value."""
    deadline = time.monotonic() + JOB_END_TIMEOUT
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, "not reached in %d s: %s" % (JOB_END_TIMEOUT, what)
            return value
        time.sleep(0.05)


def loader(mount, name="train", sampler="distributed", seed=0, replicas=1, step=1):
    return dict(data=os.path.join(mount.path, name), sampler=sampler, seed=seed,
                replicas=replicas, step=step)


def assert_clean_exit(job):
    assert job.finish() == 0, job.stderr()
    assert "Warning" not in job.stderr(), job.stderr()


def quarter_of_the_dataset(site):
    """(bytes, files): a cache size that holds a quarter of the training files, each file
    taking whole blocks of the cache's filesystem as the daemon counts them."""
    block = os.statvfs(site.root).f_frsize
    files = sorted(os.path.join(top, n) for top, _, names in
                   os.walk(os.path.join(site.source, "train")) for n in names)
    blocks = [-(-os.path.getsize(f) // block) for f in files]
    quarter = sorted(blocks)[:len(files) // 4]
    return sum(quarter) * block, len(quarter)


def test_the_same_job_run_twice_restarts_its_stream_and_both_runs_hit(lab, site, slow_source):
    # The cache holds a quarter of the dataset: the rerun's hits beyond that many were staged
    # ahead of it by its own (restarted) order, not kept from the first run.
    size, capacity_files = quarter_of_the_dataset(site)
    mount = lab.mount(slow_source, "--cache-size", str(size))
    args = dict(loaders=[loader(mount, seed=5)], epochs=2)
    k = key(lab.a, "rerun", "train.rank0")
    # The first run trains, then lingers (as a trainer writing its last checkpoint does), so
    # that the second run finds the job's stream and restarts it at epoch 0.
    first = lab.run(lab.a, "rerun", hold=True, **args)
    assert first.line()["streams"] == ["train.rank0"]
    run1 = streams(mount)[k]
    assert run1["restarts"] == 0
    assert epoch_record(run1, 0)["length"] == TRAIN_FILES
    assert epoch_record(run1, 0)["hits"] > 0, json.dumps(run1)  # a cold cache: all staged

    second = lab.run(lab.a, "rerun", **args)
    assert second.line()["streams"] == ["train.rank0"]
    assert_clean_exit(second)
    run2 = streams(mount)[k]  # the first run still holds the job
    assert run2["restarts"] == 1
    record = epoch_record(run2, 0)
    assert record["length"] == TRAIN_FILES
    assert record["opens"] >= TRAIN_FILES - EDGE
    assert record["hits"] > capacity_files, json.dumps(run2)
    assert_clean_exit(first)
    assert stats(mount)["prefetch"]["publish_failures"] == 0


def test_a_rerun_after_the_job_ended_starts_a_new_stream(lab, slow_source):
    mount = lab.mount(slow_source)
    args = dict(loaders=[loader(mount, seed=5)], epochs=1)
    k = key(lab.a, "again", "train.rank0")
    first = lab.run(lab.a, "again", **args)
    first.line()
    assert_clean_exit(first)
    wait_for("the first run's job ended",
             lambda: stats(mount)["prefetch"]["jobs_ended"] == 1 and k not in streams(mount))
    second = lab.run(lab.a, "again", hold=True, **args)
    second.line()
    stream = streams(mount)[k]
    assert stream["restarts"] == 0
    assert [r["epoch"] for _, r in stream["finished_epochs"].pairs] in ([], [0])
    assert epoch_record(stream, 0)["opens"] >= TRAIN_FILES - EDGE
    assert_clean_exit(second)


def test_two_jobs_with_the_same_rank_names_keep_their_own_streams(lab, slow_source):
    mount = lab.mount(slow_source)
    # Same user, same stream name train.rank0; other seeds, other lengths, other epochs.
    one = lab.run(lab.a, "exp-1", wait_go=True, hold=True, epochs=2,
                  loaders=[loader(mount, seed=1, replicas=1)])
    two = lab.run(lab.a, "exp-2", wait_go=True, hold=True, epochs=1,
                  loaders=[loader(mount, seed=2, replicas=2)])
    for job in (one, two):
        assert job.line() == {"ready": True}
    for job in (one, two):  # train at the same time
        job.go()
    assert one.line()["streams"] == two.line()["streams"] == ["train.rank0"]
    found = streams(mount)
    k1, k2 = key(lab.a, "exp-1", "train.rank0"), key(lab.a, "exp-2", "train.rank0")
    assert {k1, k2} <= set(found)
    s1, s2 = found[k1], found[k2]
    assert (s1["job"], s2["job"]) == ("exp-1", "exp-2")
    assert s1["user"] == s2["user"] == lab.a.uid
    assert s1["restarts"] == s2["restarts"] == 0
    assert epoch_record(s1, 0)["length"] == epoch_record(s1, 1)["length"] == TRAIN_FILES
    assert epoch_record(s2, 0)["length"] == TRAIN_FILES // 2
    # Each job's opens were matched to its own order and hit. (Which stream started a copy
    # is not asserted: the orders name the same files, and the first to plan one copies it.)
    for s in (s1, s2):
        assert epoch_record(s, 0)["hits"] > 0, json.dumps(s)
    assert epoch_record(s1, 1)["opens"] > 0
    assert stats(mount)["prefetch"]["jobs"] == 2
    assert_clean_exit(one)
    assert_clean_exit(two)


def test_a_training_and_a_validation_loader_of_one_job(lab):
    mount = lab.mount()
    job = lab.run(lab.a, "tv", hold=True, epochs=2, loaders=[
        loader(mount, "train", "random", seed=3), loader(mount, "val", "sequential")])
    assert job.line()["streams"] == ["train", "val"]
    doc = stats(mount)
    found = {k: s for k, s in doc["prefetch"]["streams"].items() if s["job"] == "tv"}
    assert sorted(found) == [key(lab.a, "tv", "train"), key(lab.a, "tv", "val")]
    for name, length in (("train", TRAIN_FILES), ("val", VAL_FILES)):
        s = found[key(lab.a, "tv", name)]
        assert epoch_record(s, 0)["length"] == length
        # The indices of each order name files of its own manifest: the loader's opens match.
        assert epoch_record(s, 0)["opens"] >= length - EDGE, json.dumps(s)
        assert s["rejected_entries"] == 0
    assert doc["prefetch"]["publish_failures"] == 0
    assert_clean_exit(job)


def test_another_user_cannot_end_or_replace_a_users_streams(lab):
    mount = lab.mount()
    k_a, k_b = key(lab.a, "shared", "train.rank0"), key(lab.b, "shared", "train.rank0")
    # The owner trains 2 epochs (epochs 0 to 2 published), then waits before the third.
    owner = lab.run(lab.a, "shared", hold=True, epochs=3, pause_after=2,
                    loaders=[loader(mount, seed=1)])
    assert owner.line() == {"paused": 2}
    before = streams(mount)[k_a]
    # Another user, the same job name and the same names inside it: stream train.rank0 and
    # manifest train. It publishes epochs 0 and 1 (older than the owner's current epoch: on
    # the owner's stream, a restart) of another manifest: every other sample, so that its
    # index i names another file than the owner's index i.
    other = lab.run(lab.b, "shared", block="publish", epochs=1,
                    loaders=[loader(mount, seed=9, step=2)])
    assert other.line() == {"blocked": 0}
    found = streams(mount)
    assert {k_a, k_b} <= set(found)
    assert (found[k_b]["user"], found[k_b]["job"]) == (lab.b.uid, "shared")
    assert found[k_b]["epoch"] == 0
    assert found[k_b]["epoch_length"] == TRAIN_FILES // 2
    after = found[k_a]
    for field in ("user", "restarts", "epoch", "epoch_length", "epochs_queued", "position",
                  "rejected_entries"):
        assert after[field] == before[field], field
    assert after["total"]["opens"] == before["total"]["opens"]
    # The other user's job ends with its process; the owner's job goes on.
    ended = stats(mount)["prefetch"]["jobs_ended"]
    assert other.finish() == 0, other.stderr()
    wait_for("the other user's job ended",
             lambda: stats(mount)["prefetch"]["jobs_ended"] == ended + 1)
    assert k_b not in streams(mount)
    assert streams(mount)[k_a]["epoch"] == before["epoch"]
    # The owner's third epoch publishes epoch 3 by index into its own manifest "train".
    owner.go()
    owner.line()
    after = streams(mount)[k_a]
    assert after["restarts"] == 0
    assert after["rejected_entries"] == 0
    assert epoch_record(after, 2)["opens"] >= TRAIN_FILES - EDGE
    assert after["epoch_length"] == TRAIN_FILES
    assert_clean_exit(owner)


def test_another_users_reads_do_not_move_a_users_stream(lab):
    mount = lab.mount()
    k = key(lab.a, "mine", "train.rank0")
    owner = lab.run(lab.a, "mine", block="publish", epochs=1, loaders=[loader(mount, seed=1)])
    assert owner.line() == {"blocked": 0}
    before = streams(mount)[k]
    # User B publishes nothing and reads the whole dataset (a copy, a scan, a job of theirs).
    reader = subprocess.run(
        [sys.executable, "-c", "import os, sys\n"
         "for top, _, names in os.walk(sys.argv[1]):\n"
         "    for n in sorted(names):\n"
         "        open(os.path.join(top, n), 'rb').read()\n",
         os.path.join(mount.path, "train")],
        user=lab.b.uid, group=lab.b.gid, extra_groups=[], env={"PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=LINE_TIMEOUT)
    assert reader.returncode == 0, reader.stderr
    after = streams(mount)[k]
    assert (after["epoch"], after["position"]) == (before["epoch"], before["position"])
    assert after["total"]["opens"] == before["total"]["opens"]


def publish_and_read(mount, job, orders, read):
    """Publishes each (epoch, paths) of ``orders`` as stream ``s`` of ``job`` from this
    process (root), then reads the files of the first ``read`` orders, in order."""
    import epochfs

    for epoch, paths in orders:
        epochfs.publish(mount.path, paths, epoch=epoch, stream="s", job=job)
    for _, paths in orders[:read]:
        for path in paths:
            with open(os.path.join(mount.path, path), "rb") as f:
                f.read()
    return streams(mount)["%d/%s/s" % (os.getuid(), job)]


def some_files(n=10):
    return ["train/class_0/img_%04d.jpg" % (4 * i) for i in range(n)]


def test_an_epochs_opens_are_counted_in_that_epoch(lab):
    mount = lab.mount()
    files = some_files()
    stream = publish_and_read(mount, "count", [(0, files), (1, files[::-1])], read=1)
    assert epoch_record(stream, 0)["opens"] == len(files)
    assert stream["this_epoch"]["opens"] in (0, len(files)), json.dumps(stream)


def test_a_restarted_stream_names_each_finished_epoch_once(lab):
    mount = lab.mount()
    files = some_files()
    orders = [(0, files), (1, files[::-1]), (2, files)]
    for _ in range(2):  # a rerun within the job's life: the second restarts the stream
        stream = publish_and_read(mount, "restarted", orders, read=2)
    assert stream["restarts"] == 1
    names = [name for name, _ in stream["finished_epochs"].pairs]
    assert len(names) == len(set(names)), names


def test_a_refused_publish_costs_one_warning_and_never_the_training_run(lab):
    mount = lab.mount(None, "--max-entries-per-user", "10")
    job = lab.run(lab.a, "limited", epochs=3, loaders=[loader(mount, sampler="random", seed=4)])
    result = job.line()
    assert job.finish() == 0, job.stderr()  # 3: the loader read another order
    # One refusal of the manifest when the sampler was made, then one per epoch (three trained
    # and the next, published ahead), reported once.
    assert result["publish_failures"] == [5]
    err = job.stderr()
    warnings = [line for line in err.splitlines() if "Warning" in line]
    assert len(warnings) == 1, err
    assert "RuntimeWarning: epochfs: publishing stream train (job limited)" in warnings[0]
    assert "--max-entries-per-user 10" in warnings[0]
    prefetch = stats(mount)["prefetch"]
    assert prefetch["publishes_over_limit"] == 5
    assert not [k for k in prefetch["streams"] if "/limited/" in k]


def test_a_job_killed_with_sigkill_has_its_streams_dropped(lab):
    mount = lab.mount()
    k = key(lab.a, "doomed", "train.rank0")
    job = lab.run(lab.a, "doomed", block="batch", epochs=1, loaders=[loader(mount, seed=2)])
    assert job.line() == {"blocked": 8}  # published, one batch read, DataLoader workers up
    wait_for("the job's stream", lambda: k in streams(mount))
    before = stats(mount)["prefetch"]
    assert before["jobs"] == 1
    os.kill(job.proc.pid, signal.SIGKILL)
    job.proc.wait()  # reaped: a zombie would still look alive
    wait_for("the killed job ended",
             lambda: stats(mount)["prefetch"]["jobs_ended"] == before["jobs_ended"] + 1)
    after = stats(mount)["prefetch"]
    assert k not in after["streams"]
    assert after["jobs"] == 0
    assert after["schedule_entries"] == 0  # its orders are freed
