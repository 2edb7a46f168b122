"""NodeAwareSampler on two emulated nodes: two real mounts of one source, each with its own
cache, and two ranks per node, each reading through a DataLoader on its node's mount."""

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torch.utils.data import DataLoader  # noqa: E402

from conftest import Mount  # noqa: E402
from epochfs.torch import NodeAwareSampler  # noqa: E402
from loader_helpers import loader_paths, train_set  # noqa: E402

NODES, RANKS_PER_NODE, EXCHANGE = 2, 2, 0.2


@pytest.fixture
def nodes(workdir, image_source):
    mounts = []
    try:
        for k in range(NODES):
            mounts.append(Mount(image_source, os.path.join(workdir, "node%d" % k),
                                os.path.join(workdir, "cache%d" % k)))
        yield mounts
    finally:
        for m in mounts:
            m.unmount()


def read_epoch(ranks, epoch):
    for _, ds, sampler in ranks:
        sampler.set_epoch(epoch)  # publishes epoch + 1 ahead
        loader_paths(DataLoader(ds, sampler=sampler, batch_size=8, num_workers=2))


def test_two_nodes_cache_their_parts_and_hit_in_epoch_1(nodes):
    ranks = []
    for rank in range(NODES * RANKS_PER_NODE):
        mount = nodes[rank // RANKS_PER_NODE]
        data, ds, _ = train_set(mount)
        ranks.append((mount, ds, NodeAwareSampler(
            ds, num_replicas=NODES * RANKS_PER_NODE, rank=rank, seed=3,
            ranks_per_node=RANKS_PER_NODE, exchange=EXCHANGE, data_dir=data, strict=True)))
    files = len(ranks[0][1])
    part = files // NODES
    arriving = round(EXCHANGE * part)

    read_epoch(ranks, 0)
    for mount in nodes:
        # The node's part, read in epoch 0, and the samples arriving in epoch 1, staged
        # ahead: not the whole dataset.
        mount.wait_cached(part + arriving)
        assert mount.stats()["cache"]["files_cached"] == part + arriving < files
        assert sorted(mount.streams()) == sorted(
            "train.rank%d" % r for r, (m, _, _) in enumerate(ranks) if m is mount)
    before = [mount.stats() for mount in nodes]

    read_epoch(ranks, 1)
    for mount, was in zip(nodes, before):
        now = mount.stats()
        # Counted over the mount, not per stream: near an epoch's end an open of a file that
        # epoch 2 (published ahead) also names may count there.
        opens, hits = now["opens"] - was["opens"], now["hits"] - was["hits"]
        assert opens == hits == RANKS_PER_NODE * len(ranks[0][2])
        assert now["misses"] == was["misses"]
