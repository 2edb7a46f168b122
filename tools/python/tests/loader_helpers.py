"""Helpers of the tests that run a real DataLoader (import after pytest.importorskip("torch")):
an ImageFolder whose samples are their paths, what a loader read, a stream's figures of an
epoch, and a spy on what the samplers publish."""

import os

import epochfs
import epochfs.torch


def read_path(path):
    """Reads the file whole, as an image loader does, and gives its path as the sample."""
    with open(path, "rb") as f:
        f.read()
    return path


def path_folder(root):
    """ImageFolder whose samples are their file paths: shows which files the loader read."""
    import torchvision
    return torchvision.datasets.ImageFolder(root, loader=read_path)


def train_set(mount):
    """(data dir, dataset, paths) of the mount's train/ folder."""
    data = os.path.join(mount.path, "train")
    ds = path_folder(data)
    return data, ds, epochfs.torch.dataset_paths(ds)


def loader_paths(loader):
    """The paths a loader over a :func:`path_folder` read, in order."""
    out = []
    for paths, _ in loader:
        out += list(paths)
    return out


def epoch_record(stream, epoch):
    """The stream's figures of ``epoch``: current, or finished (once the epoch published
    ahead of it started)."""
    if stream["this_epoch"]["epoch"] == epoch:
        return stream["this_epoch"]
    return stream["finished_epochs"][str(epoch)]


def spy_on_publish(monkeypatch, record=lambda order, kw: (kw["epoch"], order)):
    """A list of record(order, publish's keyword arguments) for every order published (each
    still published); by default (epoch, order)."""
    published = []
    real_publish = epochfs.publish

    def spy(m, order, **kw):
        order = list(order)
        published.append(record(order, kw))
        return real_publish(m, order, **kw)

    monkeypatch.setattr(epochfs, "publish", spy)
    return published
