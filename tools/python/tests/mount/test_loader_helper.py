"""epochfs.torch.publishing: one line turns an existing DataLoader into one that publishes, for
shuffle=True, an explicit sampler, a DistributedSampler and a batch sampler; over real mounts."""

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torch.utils.data import (  # noqa: E402
    BatchSampler, DataLoader, DistributedSampler, RandomSampler)

import epochfs.torch  # noqa: E402
from loader_helpers import (  # noqa: E402
    epoch_record, loader_paths, path_folder, spy_on_publish, train_set)


def test_a_shuffling_loader_publishes_what_it_reads(mount, monkeypatch):
    published = spy_on_publish(monkeypatch, lambda order, kw: order)
    data, ds, paths = train_set(mount)
    torch.manual_seed(5)
    loader = epochfs.torch.publishing(DataLoader(ds, shuffle=True, batch_size=8, num_workers=2),
                                      strict=True)
    assert isinstance(loader.sampler, epochfs.torch.PublishingSampler)
    assert (loader.batch_size, loader.num_workers) == (8, 2)
    first = loader_paths(loader)
    assert first == [paths[i] for i in published[-1]]
    assert sorted(first) == sorted(paths)
    mount.wait_cached(len(paths))
    second = loader_paths(loader)
    assert second == [paths[i] for i in published[-1]]
    assert first != second
    assert epoch_record(mount.stream("train"), 1)["hits"] == len(paths)


def test_a_distributed_sampler_keeps_its_rank_and_order(mount):
    data, ds, paths = train_set(mount)
    plain = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=3)
    loader = epochfs.torch.publishing(
        DataLoader(ds, sampler=DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True,
                                                  seed=3), batch_size=4), strict=True)
    sampler = loader.sampler
    assert isinstance(sampler, epochfs.torch.DistributedPublishingSampler)
    assert (sampler.rank, sampler.num_replicas, sampler.seed) == (1, 2, 3)
    for epoch in range(2):
        plain.set_epoch(epoch)
        sampler.set_epoch(epoch)
        assert loader_paths(loader) == [paths[i] for i in plain]
    assert mount.stream("train.rank1")["epoch_length"] == len(plain)


def test_a_batch_sampler_is_wrapped_batch_for_batch(mount):
    data, ds, paths = train_set(mount)
    batches = BatchSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(2)), 5,
                           drop_last=True)
    expected = [list(b) for b in BatchSampler(
        RandomSampler(ds, generator=torch.Generator().manual_seed(2)), 5, drop_last=True)]
    loader = epochfs.torch.publishing(DataLoader(ds, batch_sampler=batches), strict=True)
    assert isinstance(loader.batch_sampler, epochfs.torch.PublishingBatchSampler)
    got = [list(p) for p, _ in loader]
    assert got == [[paths[i] for i in b] for b in expected]
    assert mount.stats()["prefetch"]["last_publish"]["accepted"] == 5 * len(expected)


def test_a_dataset_without_root_needs_its_data_dir(mount):
    data, ds, paths = train_set(mount)
    subset = torch.utils.data.Subset(ds, range(10))
    with pytest.raises(ValueError, match="give data_dir"):
        epochfs.torch.publishing(DataLoader(subset, shuffle=True))
    loader = epochfs.torch.publishing(DataLoader(subset, shuffle=True), data,
                                      [paths[i] for i in range(10)], strict=True)
    assert sorted(loader_paths(loader)) == sorted(paths[:10])


def test_off_a_mount_strict_raises(image_source):
    ds = path_folder(os.path.join(image_source, "train"))
    with pytest.raises(FileNotFoundError, match="not on an epochfs mount"):
        epochfs.torch.publishing(DataLoader(ds, shuffle=True), strict=True)
