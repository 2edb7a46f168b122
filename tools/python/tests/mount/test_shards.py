"""PublishingShardList: tar shards read through a real DataLoader over a real mount."""

import io
import os
import tarfile

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

import epochfs.shards  # noqa: E402
from conftest import Mount  # noqa: E402
from loader_helpers import spy_on_publish  # noqa: E402

SHARDS = 12
PER_SHARD = 5


def make_shards(root):
    """SHARDS tar files of PER_SHARD members each, WebDataset-style."""
    os.makedirs(root)
    for s in range(SHARDS):
        with tarfile.open(os.path.join(root, "shard-%03d.tar" % s), "w") as tar:
            for m in range(PER_SHARD):
                data = ("shard %d sample %d" % (s, m)).encode() * 100
                info = tarfile.TarInfo("%06d.txt" % (s * PER_SHARD + m))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


class TarSamples(IterableDataset):
    """Every member of every shard the list gives this worker, as (shard name, member name)."""

    def __init__(self, shards):
        self.shards = shards

    def __iter__(self):
        for path in self.shards:
            with tarfile.open(path) as tar:
                for member in tar:
                    tar.extractfile(member).read()
                    yield os.path.basename(path), member.name


@pytest.fixture
def sharded(workdir):
    src = os.path.join(workdir, "src")
    make_shards(os.path.join(src, "shards"))
    m = Mount(src, os.path.join(workdir, "mnt"), os.path.join(workdir, "cache"))
    try:
        data = os.path.join(m.path, "shards")
        yield m, data, sorted(os.path.join(data, f) for f in os.listdir(data))
    finally:
        m.unmount()


def read_epoch(loader):
    return [(shard, member) for shards, members in loader for shard, member in zip(shards, members)]


def test_workers_read_every_shard_once_in_the_published_order_and_epoch_2_hits(
        sharded, monkeypatch):
    mount, data, paths = sharded
    published = spy_on_publish(monkeypatch, lambda order, kw: (kw["stream"], kw["epoch"], order))
    shards = epochfs.shards.PublishingShardList(paths, data, seed=3, strict=True)
    # Epochs 0 and 1 are published when the list is made, before any loader exists.
    assert [(s, e) for s, e, _ in published] == [("shards", 0), ("shards", 1)]
    loader = DataLoader(TarSamples(shards), batch_size=PER_SHARD, num_workers=2)
    for epoch in range(2):
        shards.set_epoch(epoch)
        got = read_epoch(loader)
        assert len(got) == SHARDS * PER_SHARD
        assert len(set(got)) == len(got)  # no sample twice
        order = [os.path.basename(paths[i]) for i in published[epoch][2]]
        # The two workers read alternate shards of the published order, in that order.
        first_seen = list(dict.fromkeys(shard for shard, _ in got))
        assert sorted(first_seen[0::2] + first_seen[1::2]) == sorted(order)
        assert [s for s in first_seen if order.index(s) % 2 == 0] == order[0::2]
        assert [s for s in first_seen if order.index(s) % 2 == 1] == order[1::2]
        if epoch == 0:
            mount.wait_cached(SHARDS)
    assert [e for _, e, _ in published] == [0, 1, 2]
    assert published[0][2] != published[1][2]
    stream = mount.stream("shards")
    epoch1 = stream["this_epoch"] if stream["this_epoch"]["epoch"] == 1 else \
        stream["finished_epochs"]["1"]
    assert epoch1["opens"] == SHARDS
    assert epoch1["hits"] == SHARDS


def test_ranks_split_each_epoch_between_them(sharded, monkeypatch):
    mount, data, paths = sharded
    published = spy_on_publish(monkeypatch, lambda order, kw: (kw["stream"], kw["epoch"], order))
    ranks = [epochfs.shards.PublishingShardList(paths, data, seed=5, rank=r, world_size=3,
                                                strict=True) for r in range(3)]
    for epoch in range(2):
        for r in ranks:
            r.set_epoch(epoch)
        orders = [r.order(epoch) for r in ranks]
        assert sorted(i for o in orders for i in o) == list(range(SHARDS))
        assert [len(r) for r in ranks] == [SHARDS // 3] * 3
    streams = sorted({s for s, _, _ in published})
    assert streams == ["shards.rank0", "shards.rank1", "shards.rank2"]
    assert set(mount.streams()) == set(streams)


def test_without_a_mount_it_lists_the_shards_and_warns(tmp_path):
    plain = tmp_path / "shards"
    make_shards(str(plain))
    paths = sorted(str(p) for p in plain.iterdir())
    with pytest.warns(RuntimeWarning, match="not on an epochfs mount"):
        shards = epochfs.shards.PublishingShardList(paths, str(plain), shuffle=False)
    assert list(shards) == paths
    assert shards.stream is None


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no shards"):
        epochfs.shards.PublishingShardList([], str(tmp_path))
    with pytest.raises(ValueError, match="rank 2"):
        epochfs.shards.PublishingShardList(["a.tar"], str(tmp_path), rank=2, world_size=2)
