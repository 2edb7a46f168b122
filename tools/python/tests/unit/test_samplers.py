"""The samplers' names (job, stream, manifest), publishing as a hint, and strict mode, on a fake
mount: the header lines and entries written are read back, no daemon needed."""

import errno
import os
import pickle
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, DistributedSampler, RandomSampler  # noqa: E402

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
    # Epoch 0 of each when it is made, then epoch 1 of each ahead.
    assert [h[2] for h, _ in fake_mount.orders()] == [
        "#stream " + tag, "#stream %s.rank3" % tag] * 2


def test_training_and_validation_loaders_never_share(clean_env, fake_mount):
    train = publishing(fake_mount, "train")
    val = publishing(fake_mount, "val", paths=paths_in(data_dir_of(fake_mount, "val"), 10))
    list(train), list(val)
    assert [h[1:] for h, _ in fake_mount.manifests] == [
        ["#manifest train", "#count %d" % N], ["#manifest val", "#count 10"]]
    assert [e[0] for _, e in fake_mount.manifests] == ["train/f000.jpg", "val/f000.jpg"]
    assert [(h[2], h[4]) for h, _ in fake_mount.orders()] == [
        ("#stream train", "#manifest train"), ("#stream val", "#manifest val")] * 2


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


def test_every_draw_is_published(clean_env, fake_mount):
    sampler = publishing(fake_mount, "train")
    draws = []
    for _ in range(2):
        sampler.set_epoch(5)
        draws.append([str(i) for i in sampler])
    # Epoch 0 was published when the sampler was made, and epoch 6 after each draw, ahead.
    orders = fake_mount.orders()
    assert [h[1] for h, _ in orders] == ["#epoch %d" % e for e in (0, 5, 6, 5, 6)]
    assert [orders[1][1], orders[3][1]] == draws and draws[0] != draws[1]


def test_an_order_drawn_at_its_epoch_start_publishes_only_indices_then(clean_env, fake_mount):
    # A RandomSampler without a generator: no order exists before __iter__, but the paths do.
    data = data_dir_of(fake_mount, "train")
    sampler = epochfs.torch.PublishingSampler(RandomSampler(range(N)), data, paths_in(data))
    assert len(fake_mount.manifests) == 1 and fake_mount.orders() == []
    drawn = [str(i) for i in sampler]
    assert len(fake_mount.manifests) == 1
    (header, entries), = fake_mount.orders()
    assert "#form indices" in header and entries == drawn


def test_a_restart_from_an_older_epoch_publishes_the_next_ones_again(clean_env, fake_mount):
    ours = distributed(fake_mount, 0, "train")
    for epoch in (0, 1, 2, 1, 2):
        ours.set_epoch(epoch)
        list(ours)
    assert [h[1] for h, _ in fake_mount.orders()] == [
        "#epoch %d" % e for e in (0, 1, 2, 3, 1, 2, 3)]


def refuse(monkeypatch, error):
    calls = []

    def publish(*args, **kwargs):
        calls.append(kwargs)
        raise error

    monkeypatch.setattr(epochfs, "publish", publish)
    return calls


def test_a_refusal_warns_once_and_the_indices_stay_exact(clean_env, fake_mount):
    calls = refuse(clean_env, epochfs.PublishError(
        errno.EINVAL, "job 77: 65 streams, 1 over its limit of 64", "order-1"))
    with pytest.warns(RuntimeWarning) as caught:
        sampler = publishing(fake_mount, "train")
        got = [list(sampler) for _ in range(3)]
    plain = seeded()
    assert got == [list(plain) for _ in range(3)]
    assert len(caught) == 1
    message = str(caught[0].message)
    assert fake_mount.path in message and "stream train" in message
    assert "1 over its limit of 64" in message
    assert "training continues without prefetch for this loader" in message
    assert sampler.publish_failures == len(calls) == 4  # epochs 0 to 3, each tried once


def test_an_unwritable_control_dir_warns_once_and_training_goes_on(clean_env, fake_mount):
    # The real writer fails: the manifest's name is taken by a directory (root ignores modes).
    os.mkdir(os.path.join(fake_mount.control, "manifest"))
    with pytest.warns(RuntimeWarning, match="Is a directory.*training continues") as caught:
        ours = distributed(fake_mount, 1, "train")
        got = []
        for epoch in range(3):
            ours.set_epoch(epoch)
            loader = DataLoader(list(range(N)), sampler=ours, batch_size=4, num_workers=2)
            got.append([int(i) for batch in loader for i in batch])
    assert len(caught) == 1
    theirs = DistributedSampler(range(N), num_replicas=2, rank=1, seed=3)
    want = []
    for epoch in range(3):
        theirs.set_epoch(epoch)
        want.append(list(theirs))
    assert got == want
    assert ours.publish_failures == 5  # the manifest when made, then epochs 0 to 3, once each
    assert fake_mount.orders() == []


@pytest.mark.parametrize("error", [PermissionError(errno.EACCES, "Permission denied"),
                                   FileNotFoundError(errno.ENOENT, "No such file"),
                                   OSError(errno.ENOSPC, "No space left on device")])
def test_any_os_error_is_a_warning(clean_env, fake_mount, error):
    def set_manifest(*args, **kwargs):
        raise error

    clean_env.setattr(epochfs, "set_manifest", set_manifest)
    with pytest.warns(RuntimeWarning, match=error.strerror):
        sampler = publishing(fake_mount, "train")
        assert list(sampler) == list(seeded())


def test_a_bad_explicit_stream_is_a_warning(clean_env, fake_mount):
    with pytest.warns(RuntimeWarning, match="name is 1 to 64"):
        sampler = publishing(fake_mount, "train", stream="my stream")
        assert list(sampler) == list(seeded())


def test_strict_raises(clean_env, fake_mount):
    refuse(clean_env, epochfs.PublishError(errno.EINVAL, "refused", "order-1"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(epochfs.PublishError, match="refused"):
            list(publishing(fake_mount, "train", strict=True))
        with pytest.raises(epochfs.PublishError, match="refused"):
            distributed(fake_mount, 0, "train", strict=True).set_epoch(0)
        clean_env.setenv("EPOCHFS_STRICT", "1")
        with pytest.raises(epochfs.PublishError, match="refused"):
            list(publishing(fake_mount, "train"))
    with pytest.warns(RuntimeWarning, match="refused"):
        list(publishing(fake_mount, "train", strict=False))
    clean_env.setenv("EPOCHFS_STRICT", "0")
    with pytest.warns(RuntimeWarning, match="refused"):
        list(publishing(fake_mount, "train"))
