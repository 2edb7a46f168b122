"""The user guide's recipes for Hugging Face Accelerate and PyTorch Lightning, on a real mount.

Neither package is in Debian 12, so what they do to a DataLoader is emulated here with plain
torch, as their sources do it:
- Accelerate's ``prepare(loader)`` rebuilds the loader around ``BatchSamplerShard``: every
  rank iterates the whole batch sampler and keeps every num_processes-th batch;
- Lightning (``use_distributed_sampler=False``) leaves the sampler alone and calls
  ``set_epoch(epoch)`` on ``loader.sampler`` (and ``loader.batch_sampler.sampler``) at the
  start of each epoch.
"""


import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from torch.utils.data import BatchSampler, DataLoader, RandomSampler  # noqa: E402

import epochfs  # noqa: E402
import epochfs.torch  # noqa: E402
from loader_helpers import spy_on_publish, train_set  # noqa: E402


def by_stream_and_epoch(order, kw):
    return (kw["stream"], kw["epoch"]), order

WORLD = 2


class BatchSamplerShard:
    """Accelerate's sharding of a batch sampler (split_batches=False, even_batches=False):
    rank r of n keeps batches r, r + n, r + 2n, ... of the whole sampler."""

    def __init__(self, batch_sampler, num_processes, process_index):
        self.batch_sampler = batch_sampler
        self.n = num_processes
        self.r = process_index

    def __iter__(self):
        for i, batch in enumerate(self.batch_sampler):
            if i % self.n == self.r:
                yield batch


def read(loader):
    return [p for paths, _ in loader for p in paths]


def lightning_epoch(loader, epoch):
    """What Lightning's fit loop does to a loader at an epoch's start, then the epoch."""
    for s in (loader.sampler, getattr(loader.batch_sampler, "sampler", None)):
        if hasattr(s, "set_epoch"):
            s.set_epoch(epoch)
    return read(loader)


def test_a_wrapped_sampler_under_accelerate_publishes_the_whole_order_on_every_rank(
        mount, monkeypatch):
    """The pitfall the recipe avoids: behind BatchSamplerShard each rank reads 1/n of the
    order its sampler published (so each node would stage what other nodes read)."""
    published = spy_on_publish(monkeypatch, by_stream_and_epoch)
    data, ds, paths = train_set(mount)
    sampler = epochfs.torch.PublishingSampler(
        RandomSampler(ds, generator=torch.Generator().manual_seed(1)), data, paths, strict=True)
    shard = BatchSamplerShard(BatchSampler(sampler, 8, False), WORLD, 0)
    got = read(DataLoader(ds, batch_sampler=shard))
    batches = (len(paths) + 7) // 8
    assert len(got) == 8 * ((batches + 1) // 2)  # rank 0's batches: 0, 2, 4, ...
    assert len(dict(published)[("train", 0)]) == len(paths)


def test_the_accelerate_recipe_publishes_what_each_rank_reads(mount, monkeypatch):
    """Recipe: a DistributedPublishingSampler with Accelerate's rank and world size, in a
    loader not passed to accelerator.prepare (batches moved to the device by hand)."""
    published = spy_on_publish(monkeypatch, by_stream_and_epoch)
    data, ds, paths = train_set(mount)
    reads = {}
    for rank in range(WORLD):  # accelerator.process_index, accelerator.num_processes
        sampler = epochfs.torch.DistributedPublishingSampler(
            ds, num_replicas=WORLD, rank=rank, seed=4, data_dir=data, strict=True)
        loader = DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            reads[(rank, epoch)] = read(loader)
    orders = dict(published)
    for (rank, epoch), got in reads.items():
        assert got == [paths[i] for i in orders[("train.rank%d" % rank, epoch)]]
    assert sorted(reads[(0, 1)] + reads[(1, 1)]) == sorted(paths)
    assert set(mount.streams()) == {"train.rank0", "train.rank1"}


def test_the_lightning_recipe_follows_the_epochs_lightning_sets(mount, monkeypatch):
    """Recipe: Trainer(use_distributed_sampler=False) and a DistributedPublishingSampler made in
    train_dataloader() with the trainer's global rank and world size."""
    published = spy_on_publish(monkeypatch, by_stream_and_epoch)
    data, ds, paths = train_set(mount)
    sampler = epochfs.torch.DistributedPublishingSampler(
        ds, num_replicas=WORLD, rank=1, seed=9, data_dir=data, strict=True)
    loader = DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2)
    for epoch in range(3):
        got = lightning_epoch(loader, epoch)
        orders = dict(published)
        assert got == [paths[i] for i in orders[("train.rank1", epoch)]]
        # The next epoch is staged ahead while this one runs.
        assert ("train.rank1", epoch + 1) in orders
    finished = mount.stream("train.rank1")["finished_epochs"]
    assert [finished[str(e)]["opens"] for e in range(3)] == [len(paths) // WORLD] * 3
