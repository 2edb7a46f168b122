"""Shard files (WebDataset tar files, TFRecord, Parquet, ...) read by an IterableDataset.

Datasets stored as shards are read shard by shard, so the shards are what epochfs stages and
their order is what to publish. :class:`PublishingShardList` is the list of one epoch's shard
paths for this rank and DataLoader worker, in a seeded shuffled order, and publishes the
rank's order as its own stream (named as the samplers' streams are: see
:mod:`epochfs.torch`)::

    shards = epochfs.shards.PublishingShardList(sorted(glob.glob(data_dir + "/*.tar")),
                                                data_dir, seed=0)
    dataset = MySamples(shards)   # an IterableDataset: for path in shards: open, yield samples
    loader = DataLoader(dataset, batch_size=256, num_workers=8)
    for epoch in range(epochs):
        shards.set_epoch(epoch)   # before the loader's iterator is made
        for batch in loader: ...

Each epoch the shards are shuffled with ``seed + epoch`` (every rank draws the same
permutation), rank r takes every ``world_size``-th shard from the r-th, and DataLoader worker
w of n every n-th of the rank's. The rank's order is published when the list is made (a head
start during the job's start-up) and at each ``set_epoch``, with the next epoch ahead. With
``persistent_workers=True`` the workers keep the epoch they started with: call ``set_epoch``
before the first iterator only, or use non-persistent workers.
"""

import os
import random

import torch.utils.data

from epochfs import torch as _torch_samplers

__all__ = ["PublishingShardList"]


def _distributed():
    """(rank, world size) of torch.distributed, or (0, 1) without it."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class PublishingShardList(_torch_samplers._Names, torch.utils.data.IterableDataset):
    """The shard paths one DataLoader worker of this rank reads in the current epoch.

    ``shards``: every shard's path (on the mount, or relative to its root), in a fixed order
    (sorted, say): all ranks must pass the same list. ``data_dir``: the directory on the mount
    the shards are in; it names the stream. ``rank``/``world_size`` default to
    torch.distributed's. ``shuffle=False`` keeps the list's order. ``strict`` as for
    :class:`epochfs.torch.PublishingSampler`.
    """

    def __init__(self, shards, data_dir, *, seed=0, shuffle=True, rank=None, world_size=None,
                 strict=None):
        super().__init__()
        self.shards = [os.fspath(s) for s in shards]
        if not self.shards:
            raise ValueError("PublishingShardList: no shards")
        dist_rank, dist_size = _distributed()
        self.rank = dist_rank if rank is None else int(rank)
        self.world_size = dist_size if world_size is None else int(world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError("rank %d is not in [0, %d)" % (self.rank, self.world_size))
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self._publisher = _torch_samplers._Publisher(
            data_dir, self.shards, rank=self.rank if self.world_size > 1 else None,
            strict=strict)
        self._publish(0)
        self._publish(1)

    def order(self, epoch):
        """Indices into ``shards`` that this rank reads in ``epoch``, in order."""
        everything = list(range(len(self.shards)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(everything)
        return everything[self.rank::self.world_size]

    def set_epoch(self, epoch):
        self.epoch = epoch
        self._publish(epoch)
        self._publish(epoch + 1)

    def _publish(self, epoch):
        if self._publisher.wants(epoch):
            self._publisher.publish(epoch, self.order(epoch))

    def __iter__(self):
        mine = self.order(self.epoch)
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            mine = mine[worker.id::worker.num_workers]
        return iter([self.shards[i] for i in mine])

    def __len__(self):
        """Shards this rank reads in an epoch (over all its workers)."""
        return len(self.order(self.epoch))
