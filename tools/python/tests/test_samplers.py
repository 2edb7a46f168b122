"""The samplers' names (job, stream, manifest) on a fake mount: the header lines and entries
written are read back, no daemon needed."""

import os
import pickle

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DistributedSampler, RandomSampler  # noqa: E402

import epochfs  # noqa: E402
import epochfs.torch  # noqa: E402

N = 40


def paths_in(data_dir, n=N):
    return [os.path.join(data_dir, "f%03d.jpg" % i) for i in range(n)]


def seeded(n=N, seed=7):
    return RandomSampler(range(n), generator=torch.Generator().manual_seed(seed))


def data_dir_of(mount, *names):
    path = os.path.join(mount.path, *names)
    os.makedirs(path, exist_ok=True)
    return path


def publishing(mount, *names, paths=None, **kwargs):
    data = data_dir_of(mount, *names)
    return epochfs.torch.PublishingSampler(seeded(), data, paths or paths_in(data), **kwargs)


def distributed(mount, rank, *names, **kwargs):
    data = data_dir_of(mount, *names)
    return epochfs.torch.DistributedPublishingSampler(range(N), num_replicas=max(2, rank + 1),
                                                      rank=rank,
                                                      seed=3, data_dir=data,
                                                      paths=paths_in(data), **kwargs)


def test_the_headers_of_rank_1_of_a_slurm_job(clean_env, fake_mount):
    clean_env.setenv("SLURM_JOB_ID", "77")
    ours = distributed(fake_mount, 1, "train")
    ours.set_epoch(0)
    theirs = DistributedSampler(range(N), num_replicas=2, rank=1, seed=3)
    assert fake_mount.manifests == [
        (["#job 77", "#manifest train", "#count %d" % N],
         ["train/f%03d.jpg" % i for i in range(N)])]
    orders = fake_mount.orders()
    for epoch, (header, entries) in enumerate(orders):
        assert header == ["#form indices", "#epoch %d" % epoch, "#stream train.rank1",
                          "#job 77", "#manifest train", "#count %d" % (N // 2)]
        theirs.set_epoch(epoch)
        assert entries == [str(i) for i in theirs]
    assert len(orders) == 2  # epoch 0 and, ahead, epoch 1


@pytest.mark.parametrize("names, tag", [
    (["train"], "train"),
    ([], "root"),
    (["imagenet", "val"], "imagenet.val"),
    (["my data", "été"], "my_data._t_"),
])
def test_stream_and_manifest_are_named_after_the_data_dir(clean_env, fake_mount, names, tag):
    plain = publishing(fake_mount, *names)
    assert (plain.stream, plain.manifest) == (tag, tag)
    ranked = distributed(fake_mount, 3, *names)
    assert (ranked.stream, ranked.manifest) == (tag + ".rank3", tag)
    list(plain)
    ranked.set_epoch(0)
    assert [h[-2] for h, _ in fake_mount.manifests] == ["#manifest " + tag] * 2
    assert [h[2] for h, _ in fake_mount.orders()] == [
        "#stream " + tag, "#stream %s.rank3" % tag, "#stream %s.rank3" % tag]


def test_training_and_validation_loaders_never_share(clean_env, fake_mount):
    train = publishing(fake_mount, "train")
    val = publishing(fake_mount, "val", paths=paths_in(data_dir_of(fake_mount, "val"), 10))
    list(train), list(val)
    assert [h[1:] for h, _ in fake_mount.manifests] == [
        ["#manifest train", "#count %d" % N], ["#manifest val", "#count 10"]]
    assert [e[0] for _, e in fake_mount.manifests] == ["train/f000.jpg", "val/f000.jpg"]
    assert [(h[2], h[4]) for h, _ in fake_mount.orders()] == [
        ("#stream train", "#manifest train"), ("#stream val", "#manifest val")]


def test_a_second_path_list_with_the_same_tag_gets_a_suffix(clean_env, fake_mount):
    data = data_dir_of(fake_mount, "train")
    first = publishing(fake_mount, "train")
    second = publishing(fake_mount, "train", paths=paths_in(data)[::-1])
    third = publishing(fake_mount, "train", paths=paths_in(data)[:5])
    again = publishing(fake_mount, "train")  # the first's paths: the same loader made anew
    assert [s.stream for s in (first, second, third, again)] == [
        "train", "train.2", "train.3", "train"]
    assert [s.manifest for s in (first, second, third, again)] == [
        "train", "train.2", "train.3", "train"]


def test_long_names_are_cut_before_their_suffix(clean_env, fake_mount):
    name = "d" * 70
    first = publishing(fake_mount, name)
    second = publishing(fake_mount, name, paths=["x"] * N)
    ranked = distributed(fake_mount, 12, name)
    assert first.stream == first.manifest == "d" * 64
    assert second.stream == second.manifest == "d" * 62 + ".2"
    assert ranked.stream == "d" * 57 + ".rank12" and ranked.manifest == "d" * 64


def test_an_explicit_stream_names_the_manifest_too(clean_env, fake_mount):
    sampler = publishing(fake_mount, "train", stream="mine")
    assert (sampler.stream, sampler.manifest) == ("mine", "mine")


def test_the_job_is_fixed_when_the_sampler_is_made(clean_env, fake_mount):
    clean_env.setenv("SLURM_JOB_ID", "77")
    sampler = distributed(fake_mount, 0, "train")
    clean_env.setenv("EPOCHFS_JOB", "later")
    sampler.set_epoch(0)
    assert [h[3] for h, _ in fake_mount.orders()] == ["#job 77"] * 2
    copy = pickle.loads(pickle.dumps(sampler))  # as another process would get it
    assert copy.job == "77"
    copy.set_epoch(1)  # a copy never publishes
    assert len(fake_mount.orders()) == 2
