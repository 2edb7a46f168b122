"""NodeAwareSampler: its promises checked on the orders every rank yields (no mount), and its
publishing on a fake mount (two nodes on real mounts: mount/test_node_sampler_mounts.py)."""

import collections
import itertools
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from torch.utils.data import DistributedSampler  # noqa: E402

from epochfs.torch import NodeAwareSampler  # noqa: E402

N = 120


def job(n=N, nodes=3, ranks_per_node=2, **kwargs):
    """One sampler per rank, each made on its own as its rank's process would, off a mount."""
    kwargs.setdefault("seed", 5)
    kwargs.setdefault("exchange", 0.2)
    world = nodes * ranks_per_node
    with pytest.warns(RuntimeWarning, match="not on an epochfs mount"):
        return [NodeAwareSampler(range(n), num_replicas=world, rank=r,
                                 ranks_per_node=ranks_per_node, data_dir="/nonexistent",
                                 paths=["f%d" % i for i in range(n)], **kwargs)
                for r in range(world)]


def orders(ranks, epoch):
    """Each rank's order of ``epoch``."""
    out = []
    for sampler in ranks:
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def node_sets(rank_orders, ranks_per_node):
    """The samples each node's ranks read, node by node."""
    return [set(itertools.chain(*rank_orders[k:k + ranks_per_node]))
            for k in range(0, len(rank_orders), ranks_per_node)]


@pytest.mark.parametrize("nodes, ranks_per_node", [(2, 2), (3, 2), (4, 1), (1, 4), (5, 3)])
def test_each_epoch_reads_every_sample_once_across_ranks(nodes, ranks_per_node):
    ranks = job(nodes=nodes, ranks_per_node=ranks_per_node)
    for epoch in range(5):
        got = orders(ranks, epoch)
        assert sorted(itertools.chain(*got)) == list(range(N))
        assert {len(o) for o in got} == {N // (nodes * ranks_per_node)} == {len(ranks[0])}


def test_the_ranks_of_a_node_share_its_part_reshuffled_each_epoch():
    ranks = job(nodes=3, ranks_per_node=2, exchange=0)
    first, second = orders(ranks, 0), orders(ranks, 1)
    parts = node_sets(first, 2)
    assert [len(p) for p in parts] == [N // 3] * 3
    assert set.union(*parts) == set(range(N))
    assert node_sets(second, 2) == parts
    for r in range(len(ranks)):
        # Reshuffled: another order, and other samples among the node's ranks.
        assert first[r] != second[r] and set(first[r]) != set(second[r])


@pytest.mark.parametrize("drop_last", [False, True])
def test_padding_and_drop_last_as_in_distributed_sampler(drop_last):
    n, world = 103, 6
    theirs = DistributedSampler(range(n), num_replicas=world, rank=0, drop_last=drop_last)
    ranks = job(n=n, nodes=3, ranks_per_node=2, drop_last=drop_last)
    for epoch in range(3):
        got = orders(ranks, epoch)
        read = list(itertools.chain(*got))
        assert {len(o) for o in got} == {len(theirs)}
        assert len(read) == theirs.total_size
        if drop_last:
            assert len(set(read)) == len(read)  # n - total_size samples left out
        else:
            assert set(read) == set(range(n))  # total_size - n samples read twice
        # A node repeats or leaves out samples of its own part only.
        parts = node_sets(got, 2)
        assert sum(len(p) for p in parts) == len(set(read))


@pytest.mark.parametrize("n, nodes", [(N, 4), (122, 4)])
@pytest.mark.parametrize("exchange", [0.1, 0.25, 0.5, 1.0])
def test_each_epoch_moves_that_fraction_of_each_part_evenly(n, nodes, exchange):
    # The count is exact, not a statistical estimate: every node gives away exactly
    # round(exchange * (n // nodes)) samples and gets as many back (the docstring's promise).
    # So the fraction of a part that moves is off `exchange` only by that rounding (half a
    # sample) and, for a part one sample larger than n // nodes, by `exchange` samples.
    moves = round(exchange * (n // nodes))
    ranks = job(n=n, nodes=nodes, ranks_per_node=1, exchange=exchange)
    before = node_sets(orders(ranks, 0), 1)
    for epoch in range(1, 6):
        after = node_sets(orders(ranks, epoch), 1)
        for k in range(nodes):
            assert len(before[k] - after[k]) == len(after[k] - before[k]) == moves
            assert abs(len(before[k] - after[k]) - exchange * len(before[k])) <= 0.5 + exchange
            # Spread over the other nodes evenly: as many from each, give or take one.
            senders = collections.Counter(
                j for i in after[k] - before[k] for j in range(nodes) if i in before[j])
            assert k not in senders and sum(senders.values()) == moves
            assert max(senders.values()) - min(senders.values()) <= 1
            assert len(senders) == min(nodes - 1, moves)
        before = after


def test_without_exchange_a_node_keeps_its_part_forever():
    ranks = job(nodes=4, ranks_per_node=2, exchange=0)
    first = orders(ranks, 0)
    for epoch in range(1, 10):
        got = orders(ranks, epoch)
        assert node_sets(got, 2) == node_sets(first, 2)
        assert got != first


def test_the_same_from_the_seed_and_epoch_alone():
    one, other = job(), job()
    walked = [orders(one, e) for e in range(8)]
    # Samplers made anew, asking for epochs out of order (a resume from a checkpoint, reruns).
    assert orders(other, 7) == walked[7]
    assert orders(other, 2) == walked[2]
    for epoch in (3, 4, 3, 5, 6, 0, 1):
        assert orders(other, epoch) == walked[epoch]
    assert orders(job(seed=6), 1) != walked[1]


def test_set_epoch_as_in_distributed_sampler():
    sampler = job()[1]
    assert list(sampler) == list(sampler)  # epoch 0 until set_epoch, as DistributedSampler
    first = list(sampler)
    sampler.set_epoch(3)
    assert sampler.epoch == 3 and list(sampler) != first
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_without_shuffle_the_parts_are_ranges_read_in_order():
    ranks = job(nodes=3, ranks_per_node=2, shuffle=False, exchange=0.5)
    for epoch in range(3):
        got = orders(ranks, epoch)
        assert got[0] == list(range(0, 40, 2)) and got[1] == list(range(1, 40, 2))
        assert got[5] == list(range(81, 120, 2))


def test_the_layout_from_the_arguments_or_torchrun(monkeypatch):
    ranks = job(nodes=3, ranks_per_node=2)
    assert [(s.node, s.num_nodes) for s in ranks] == [(r // 2, 3) for r in range(6)]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.warns(RuntimeWarning, match="not on an epochfs mount"):
        sampler = NodeAwareSampler(range(N), num_replicas=6, rank=4, data_dir="/nonexistent",
                                   paths=["f%d" % i for i in range(N)])
    assert (sampler.ranks_per_node, sampler.node, sampler.num_nodes) == (3, 1, 2)


@pytest.mark.filterwarnings("ignore:.*not on an epochfs mount")
def test_a_bad_layout_is_refused(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    paths = ["f%d" % i for i in range(N)]

    def make(n=N, **kwargs):
        args = dict(num_replicas=6, rank=0, ranks_per_node=2, data_dir="/nonexistent",
                    paths=paths[:n])
        args.update(kwargs)
        return NodeAwareSampler(range(n), **args)

    with pytest.raises(ValueError, match="6 ranks do not make nodes of 4 ranks"):
        make(ranks_per_node=4)
    with pytest.raises(ValueError, match="give ranks_per_node"):
        make(ranks_per_node=None)
    with pytest.raises(ValueError, match="exchange must be between 0 and 1"):
        make(exchange=1.5)
    with pytest.raises(ValueError, match="2 samples cannot fill 3 nodes"):
        make(n=2)


def test_it_publishes_as_the_distributed_sampler_does(clean_env, fake_mount):
    clean_env.setenv("SLURM_JOB_ID", "77")
    data = os.path.join(fake_mount.path, "train")
    os.makedirs(data)
    paths = [os.path.join(data, "f%03d.jpg" % i) for i in range(N)]
    ours = NodeAwareSampler(range(N), num_replicas=4, rank=3, ranks_per_node=2, data_dir=data,
                            paths=paths, strict=True)
    assert (ours.job, ours.stream, ours.manifest) == ("77", "train.rank3", "train")
    assert len(fake_mount.orders()) == 1  # epoch 0, when made
    drawn = []
    for epoch in range(2):
        ours.set_epoch(epoch)
        drawn.append([str(i) for i in ours])
    published = fake_mount.orders()
    # Epoch 0 when made, then each next epoch ahead at set_epoch; none twice.
    assert [h[1:3] for h, _ in published] == [
        ["#epoch %d" % e, "#stream train.rank3"] for e in (0, 1, 2)]
    assert [entries for _, entries in published[:2]] == drawn
    assert [e for _, e in fake_mount.manifests] == [["train/f%03d.jpg" % i for i in range(N)]]
