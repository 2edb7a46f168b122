"""The PyTorch samplers with a real DataLoader over ImageFolder on a real mount."""

import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from torch.utils.data import (  # noqa: E402
    DataLoader, DistributedSampler, RandomSampler, SequentialSampler)

import epochfs  # noqa: E402
import epochfs.torch  # noqa: E402
from conftest import Mount, make_images  # noqa: E402
from loader_helpers import (  # noqa: E402
    epoch_record, loader_paths, path_folder, spy_on_publish, train_set)


def seeded(dataset, seed=7):
    return RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))


def test_the_loader_reads_in_the_published_order_and_epoch_2_hits(mount, monkeypatch):
    published = spy_on_publish(monkeypatch, lambda order, kw: order)
    data = os.path.join(mount.path, "train")
    ds = path_folder(data)
    paths = epochfs.torch.dataset_paths(ds)
    sampler = epochfs.torch.PublishingSampler(seeded(ds), data, paths, strict=True)
    loader = DataLoader(ds, sampler=sampler, batch_size=8, num_workers=4)

    first = loader_paths(loader)
    assert first == [paths[i] for i in published[0]]
    assert sorted(first) == sorted(paths)
    mount.wait_cached(len(paths))
    second = loader_paths(loader)
    assert second == [paths[i] for i in published[1]]
    assert published[0] != published[1]
    assert sampler.stream == "train"
    assert published[2] != published[1]  # epoch 2, ahead
    epoch = epoch_record(mount.stream("train"), 1)
    assert epoch["opens"] == len(paths)
    assert epoch["hits"] == len(paths)


def test_the_wrapper_yields_exactly_what_the_wrapped_sampler_yields(mount):
    data = os.path.join(mount.path, "train")
    ds = path_folder(data)
    plain = seeded(ds)
    wrapped = epochfs.torch.PublishingSampler(seeded(ds), data, epochfs.torch.dataset_paths(ds),
                                              strict=True)
    for _ in range(3):
        assert list(wrapped) == list(plain)
    assert len(wrapped) == len(plain)


def test_a_training_and_a_validation_loader_keep_their_own_orders(workdir, image_source):
    make_images(os.path.join(image_source, "val"), files=24)
    mount = Mount(image_source, os.path.join(workdir, "mnt"), os.path.join(workdir, "cache"))
    try:
        loaders = {}
        for name, sampler in (("train", seeded), ("val", SequentialSampler)):
            ds = path_folder(os.path.join(mount.path, name))
            paths = epochfs.torch.dataset_paths(ds)
            s = epochfs.torch.PublishingSampler(sampler(ds), os.path.join(mount.path, name),
                                                paths, strict=True)
            loaders[name] = (DataLoader(ds, sampler=s, batch_size=8), paths)
        for epoch in range(2):
            for name, (loader, paths) in loaders.items():
                assert sorted(loader_paths(loader)) == sorted(paths)
                # Each iteration publishes the next epoch ahead, as indices only: they must
                # name the loader's own manifest, not the one the other loader published last.
                last = mount.stats()["prefetch"]["last_publish"]
                assert (last["stream"], last["epoch"]) == (name, epoch + 1)
                assert (last["accepted"], last["rejected"]) == (len(paths), 0)
        assert sorted(mount.streams()) == ["train", "val"]
    finally:
        mount.unmount()


def test_outside_epochfs_strict_raises(image_source, monkeypatch):
    # The guide says strict raises where publishing cannot work; off a mount it only warned.
    data = os.path.join(image_source, "train")
    ds = path_folder(data)
    with pytest.raises(FileNotFoundError, match="not on an epochfs mount"):
        epochfs.torch.PublishingSampler(seeded(ds), data, epochfs.torch.dataset_paths(ds),
                                        strict=True)
    monkeypatch.setenv("EPOCHFS_STRICT", "1")
    with pytest.raises(FileNotFoundError, match="not on an epochfs mount"):
        epochfs.torch.PublishingSampler(seeded(ds), data, epochfs.torch.dataset_paths(ds))


def test_outside_epochfs_one_warning_and_the_same_order(image_source):
    data = os.path.join(image_source, "train")
    ds = path_folder(data)
    with pytest.warns(RuntimeWarning, match="not on an epochfs mount"):
        wrapped = epochfs.torch.PublishingSampler(seeded(ds), data,
                                                  epochfs.torch.dataset_paths(ds))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [list(wrapped) for _ in range(2)]
    plain = seeded(ds)
    assert got == [list(plain) for _ in range(2)]


def test_distributed_sampler_matches_torch_and_publishes_ahead(mount):
    data = os.path.join(mount.path, "train")
    ds = path_folder(data)
    ours = epochfs.torch.DistributedPublishingSampler(ds, num_replicas=2, rank=1, seed=3,
                                                      data_dir=data, strict=True)
    assert ours.stream == "train.rank1"
    theirs = DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    for epoch in range(3):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        stream = mount.stream("train.rank1")
        # The next epoch is queued as soon as this one is set, before set_epoch(epoch + 1).
        assert stream["epochs_queued"] >= 1
        assert list(ours) == list(theirs)
        loader_paths(DataLoader(ds, sampler=ours, batch_size=8, num_workers=2))


# One rank of a torchrun job: it publishes, prints its order and, like a trainer, stays until
# told to end (a job's streams are dropped when its processes have exited).
RANK_SCRIPT = """
import os, sys, json
sys.path.insert(0, %(pkg)r)
import torchvision, epochfs, epochfs.torch
ds = torchvision.datasets.ImageFolder(%(data)r, loader=lambda p: p)
s = epochfs.torch.DistributedPublishingSampler(ds, num_replicas=2, rank=int(sys.argv[1]),
                                               data_dir=%(data)r)
s.set_epoch(0)
print(json.dumps([s.job, s.stream, [ds.samples[i][0] for i in s]]), flush=True)
sys.stdin.read()
"""


def test_two_ranks_publish_their_own_streams_covering_the_dataset(mount):
    import json

    data = os.path.join(mount.path, "train")
    pkg = os.path.dirname(os.path.dirname(epochfs.__file__))
    script = RANK_SCRIPT % {"pkg": pkg, "data": data}
    env = dict(os.environ, TORCHELASTIC_RUN_ID="two-ranks", EPOCHFS_STRICT="1")
    env.pop("EPOCHFS_JOB", None)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(r)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=env) for r in (0, 1)]
    try:
        ranks = [json.loads(p.stdout.readline()) for p in procs]
        assert [r[:2] for r in ranks] == [["two-ranks", "train.rank0"],
                                          ["two-ranks", "train.rank1"]]
        orders = [r[2] for r in ranks]
        streams = [mount.stream("train.rank%d" % r, "two-ranks") for r in (0, 1)]
    finally:
        for p in procs:
            p.communicate(b"")
    assert all(p.returncode == 0 for p in procs)
    for r, stream in enumerate(streams):
        assert stream["epoch"] == 0
        assert stream["epoch_length"] == len(orders[r])
        assert stream["epochs_queued"] == 1
    everything = set(epochfs.torch.dataset_paths(path_folder(data)))
    assert set(orders[0]) | set(orders[1]) == everything


# A head start: the first epoch is published when the sampler is made, during the job's
# start-up, and each next epoch ahead; each epoch's order once.

def test_a_distributed_sampler_publishes_epoch_0_when_made(mount, monkeypatch):
    published = spy_on_publish(monkeypatch)
    data, ds, _ = train_set(mount)
    ours = epochfs.torch.DistributedPublishingSampler(ds, num_replicas=2, rank=1, seed=3,
                                                      data_dir=data, strict=True)
    stream = mount.stream("train.rank1")
    assert (stream["epoch"], stream["epochs_queued"]) == (0, 0)
    assert stream["epoch_length"] == len(ds) // 2
    assert mount.stats()["prefetch"]["publishes"] == 2  # the manifest and epoch 0
    theirs = DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    for epoch in range(2):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs) == dict(published)[epoch]
    # Epoch 0 when made, then 1 and 2 ahead: none twice.
    assert [e for e, _ in published] == [0, 1, 2]
    assert mount.stats()["prefetch"]["publishes"] == 4


@pytest.mark.parametrize("make", [seeded, SequentialSampler], ids=["seeded", "sequential"])
def test_a_reproducible_sampler_publishes_epoch_0_when_made(mount, monkeypatch, make):
    published = spy_on_publish(monkeypatch)
    data, ds, paths = train_set(mount)
    ours = epochfs.torch.PublishingSampler(make(ds), data, paths, strict=True)
    stream = mount.stream("train")
    assert (stream["epoch"], stream["epochs_queued"]) == (0, 0)
    assert stream["epoch_length"] == len(paths)
    plain = make(ds)
    for epoch in range(3):
        got = list(ours)
        # The generator was put back after each draw ahead: the same orders as without it.
        assert got == list(plain) == dict(published)[epoch]
        # The next epoch is queued as soon as this one is drawn.
        assert mount.stream("train")["epochs_queued"] == epoch + 1
    assert [e for e, _ in published] == [0, 1, 2, 3]
    assert mount.stats()["prefetch"]["publishes"] == 5  # the manifest and 4 epochs


def test_the_loader_reads_the_order_published_when_the_sampler_was_made(mount, monkeypatch):
    published = spy_on_publish(monkeypatch)
    data, ds, paths = train_set(mount)
    sampler = epochfs.torch.PublishingSampler(seeded(ds), data, paths, strict=True)
    mount.wait_cached(len(paths))  # staged meanwhile, as during a job's start-up
    loader = DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2)
    assert loader_paths(loader) == [paths[i] for i in published[0][1]]
    assert [e for e, _ in published] == [0, 1]
    epoch = epoch_record(mount.stream("train"), 0)
    assert epoch["opens"] == len(paths)
    assert epoch["hits"] == len(paths)


@pytest.mark.parametrize("make", [
    RandomSampler,  # a fresh seed at each draw
    lambda ds: DistributedSampler(ds, num_replicas=1, rank=0),  # an order set by set_epoch
], ids=["unseeded", "set_epoch"])
def test_an_unknown_order_is_published_when_drawn(mount, monkeypatch, make):
    published = spy_on_publish(monkeypatch)
    data, ds, paths = train_set(mount)
    ours = epochfs.torch.PublishingSampler(make(ds), data, paths, strict=True)
    # Only the manifest, when the sampler was made: the order is drawn by __iter__.
    assert published == [] and mount.stats()["prefetch"]["publishes"] == 1
    draws = [list(ours) for _ in range(2)]
    assert published == [(0, draws[0]), (1, draws[1])]


def test_a_draw_unlike_the_one_published_ahead_is_published(mount, monkeypatch):
    published = spy_on_publish(monkeypatch)
    data, ds, paths = train_set(mount)
    generator = torch.Generator().manual_seed(7)
    ours = epochfs.torch.PublishingSampler(RandomSampler(ds, generator=generator), data,
                                           paths, strict=True)
    generator.manual_seed(8)  # used elsewhere before the first epoch
    got = list(ours)
    assert [e for e, _ in published] == [0, 0, 1]
    assert published[1][1] == got != published[0][1]
    assert mount.stream("train")["epoch_length"] == len(paths)


def test_a_resumed_run_drops_the_epoch_published_when_the_sampler_was_made(mount):
    data, ds, _ = train_set(mount)
    ours = epochfs.torch.DistributedPublishingSampler(ds, num_replicas=1, rank=0, seed=3,
                                                      data_dir=data, strict=True)
    ours.set_epoch(3)  # resumed from a checkpoint: epoch 0 will not be read
    stream = mount.stream("train.rank0")
    assert (stream["epoch"], stream["epochs_queued"], stream["restarts"]) == (3, 1, 1)
    loader = DataLoader(ds, sampler=ours, batch_size=8, num_workers=2)
    assert len(loader_paths(loader)) == len(ds)
    # The trainer's reads followed epoch 3, not a stale epoch 0 in front of it.
    assert epoch_record(mount.stream("train.rank0"), 3)["opens"] == len(ds)


def test_a_wrapper_set_to_a_later_epoch_drops_the_one_published_ahead(mount):
    data, ds, paths = train_set(mount)
    ours = epochfs.torch.PublishingSampler(seeded(ds), data, paths, strict=True)
    ours.set_epoch(5)
    loader = DataLoader(ds, sampler=ours, batch_size=8, num_workers=2)
    assert len(loader_paths(loader)) == len(paths)
    stream = mount.stream("train")
    assert stream["restarts"] == 1
    assert epoch_record(stream, 5)["opens"] == len(paths)


# Batch samplers, ConcatDataset, and the generator Accelerate synchronises.

def test_a_batch_sampler_publishes_the_order_its_batches_are_read_in(mount, monkeypatch):
    published = spy_on_publish(monkeypatch)
    data, ds, paths = train_set(mount)
    batches = torch.utils.data.BatchSampler(seeded(ds), batch_size=8, drop_last=False)
    ours = epochfs.torch.PublishingBatchSampler(
        torch.utils.data.BatchSampler(seeded(ds), batch_size=8, drop_last=False), data, paths,
        strict=True)
    assert len(ours) == len(batches)
    assert ours.generator is ours.sampler.generator
    loader = DataLoader(ds, batch_sampler=ours, num_workers=2)
    for epoch in range(2):
        expected = list(batches)
        read = loader_paths(loader)
        order = [i for batch in expected for i in batch]
        assert read == [paths[i] for i in order]
        assert dict(published)[epoch] == order
    assert [e for e, _ in published] == [0, 1]
    assert epoch_record(mount.stream("train"), 1)["opens"] == len(paths)


def test_a_concat_dataset_publishes_the_files_of_its_parts(mount, monkeypatch):
    published = spy_on_publish(monkeypatch)
    data = os.path.join(mount.path, "train")
    parts = [path_folder(data), path_folder(data)]
    ds = torch.utils.data.ConcatDataset(parts)
    paths = epochfs.torch.dataset_paths(ds)
    assert paths == epochfs.torch.dataset_paths(parts[0]) * 2
    sampler = epochfs.torch.PublishingSampler(seeded(ds), data, paths, strict=True)
    loader = DataLoader(ds, sampler=sampler, batch_size=8)
    assert loader_paths(loader) == [paths[i] for i in published[0][1]]


def test_the_wrapped_samplers_generator_is_read_and_set_through_the_wrapper(mount):
    data, ds, paths = train_set(mount)
    inner = seeded(ds)
    ours = epochfs.torch.PublishingSampler(inner, data, paths, strict=True)
    assert ours.generator is inner.generator
    g = torch.Generator().manual_seed(11)
    ours.generator = g
    assert inner.generator is g
    assert list(ours) == list(RandomSampler(ds, generator=torch.Generator().manual_seed(11)))


class Endless(torch.utils.data.Sampler):
    """An iteration-based sampler (as Detectron2's TrainingSampler): shuffles forever."""

    def __init__(self, n, seed=5):
        self.n = n
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self):
        while True:
            yield from torch.randperm(self.n, generator=self.generator).tolist()


def test_an_endless_sampler_is_published_in_windows_as_it_is_read(mount, monkeypatch):
    published = spy_on_publish(monkeypatch)
    data, ds, paths = train_set(mount)
    sampler = epochfs.torch.PublishingSampler(Endless(len(ds)), data, paths, strict=True,
                                              window=50)
    assert published == []  # nothing drawn before the loader asks: the draw never ends
    loader = DataLoader(ds, sampler=sampler, batch_size=10, num_workers=2)
    read = []
    for batch_paths, _ in loader:
        read += list(batch_paths)
        if len(read) >= 200:
            break
    epochs = [e for e, _ in published]
    assert epochs == list(range(len(epochs))) and len(epochs) >= 5  # windows 0-3, 4 ahead
    assert all(len(order) == 50 for _, order in published)
    windows = [paths[i] for _, order in published for i in order]
    assert read == windows[:200]
    # The mount followed the reads from window to window (a file in two adjacent windows may
    # count in either, so the windows' own figures are not compared).
    assert mount.stream("train")["epoch"] >= 3


def test_a_window_below_1_is_refused(mount):
    data, ds, paths = train_set(mount)
    with pytest.raises(ValueError, match="window"):
        epochfs.torch.PublishingSampler(Endless(len(ds)), data, paths, window=0)
