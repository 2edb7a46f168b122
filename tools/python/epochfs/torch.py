"""PyTorch samplers that publish the epoch's order to epochfs as they yield it.

One line for an existing loader (``shuffle=True``, any sampler, ``DistributedSampler``, or a
batch sampler)::

    loader = epochfs.torch.publishing(DataLoader(dataset, shuffle=True, batch_size=256))

or two lines in a training script::

    sampler = epochfs.torch.PublishingSampler(RandomSampler(dataset), data_dir,
                                              epochfs.torch.dataset_paths(dataset))
    loader = DataLoader(dataset, sampler=sampler, num_workers=8, batch_size=256)

or, for distributed training, ``DistributedPublishingSampler(dataset, ...)`` in place of
``DistributedSampler(dataset, ...)``, and ``NodeAwareSampler(dataset, ..., ranks_per_node=8)``
to keep each node on its own part of the dataset. The index of a sample is its position in
``paths``; the paths are published once as a manifest, and each epoch as indices into it.

Names. Orders and manifests belong to the job of :func:`epochfs.job_id`, computed when the
sampler is made (in the main process, before DataLoader workers copy it). Within the job,
each sampler is named after its data dir relative to the mount's root, its *tag*:
``<mount>/train`` gives ``train``, ``<mount>/imagenet/val`` gives ``imagenet.val``, the root
itself ``root`` (characters other than ``A-Z a-z 0-9 . _ -`` become ``_``; at most 64 bytes).
So a training and a validation loader of one job never share an order or a manifest. A second
sampler of the same process with the same tag but a different list of paths gets the tag
``.2`` (then ``.3``, ...); one with the same paths shares the tag. The manifest is named
after the tag. ``PublishingSampler`` publishes the stream ``<tag>`` (or its ``stream=``
argument, which then names the manifest too), ``DistributedPublishingSampler`` the stream
``<tag>.rank<rank>``: ``train.rank0``, ``train.rank1``, ... in ``epochfs stats``.

Publishing is a hint. When the data dir is not on an epochfs mount, the samplers warn once
and otherwise behave exactly like the sampler they wrap, so one script runs with and without
epochfs. When publishing fails (the daemon refuses an order, say over a limit, or the control
directory cannot be written), a sampler warns once with the mount and the reason, keeps
yielding exactly the wrapped sampler's indices, and counts later failures silently in
``publish_failures``; training goes on, without prefetch for that loader. ``strict=True``, or
``EPOCHFS_STRICT=1`` in the environment, raises the error instead (for tests).

A head start. A training job takes seconds to minutes (CUDA, the model, a checkpoint) before
its first batch, so a sampler publishes its first epoch when it is made, and the next epoch
while the current one runs, wherever the order is known ahead: always for
``DistributedPublishingSampler``, and for ``PublishingSampler`` as its docstring says. An
order published ahead is not published again when its epoch starts. The dataset's paths (the
manifest) are always published when a sampler is made: an order drawn only as its epoch starts
is then a list of indices, quick to publish.
"""

import errno
import hashlib
import itertools
import math
import os
import threading
import warnings

import torch.utils.data

import epochfs

__all__ = ["DistributedPublishingSampler", "NodeAwareSampler", "PublishingBatchSampler",
           "PublishingSampler", "dataset_paths"]


def dataset_paths(dataset):
    """The file of every sample of ``dataset``, by index.

    Works with ``ImageFolder``/``DatasetFolder`` (``dataset.samples``), datasets with
    ``imgs`` or ``paths``, and ``Subset`` and ``ConcatDataset`` of those.
    """
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        # Its index i is the i-th sample of its datasets one after the other.
        return [p for part in dataset.datasets for p in dataset_paths(part)]
    if isinstance(dataset, torch.utils.data.Subset):
        inner = dataset_paths(dataset.dataset)
        return [inner[i] for i in dataset.indices]
    for name in ("samples", "imgs"):
        items = getattr(dataset, name, None)
        if items is not None:
            return [item[0] if isinstance(item, (tuple, list)) else item for item in items]
    items = getattr(dataset, "paths", None)
    if items is not None:
        return list(items)
    raise TypeError("cannot find the files of %s: give the paths explicitly" % type(dataset))


# Tags given in this process: (mount, tag) -> the path lists that have it, the first
# without a suffix, the second with ".2", ...; each list as its length and hash.
_tags = {}
_tags_lock = threading.Lock()


def _strict(strict):
    if strict is not None:
        return bool(strict)
    return os.environ.get("EPOCHFS_STRICT", "").strip().lower() in ("1", "true", "yes", "on")


def _tag(mount, data_dir, paths):
    """(base, suffix): the data dir's name relative to the mount and its de-duplicating
    suffix (``""``, ``".2"``, ...) among this process's samplers."""
    rel = os.path.relpath(os.path.abspath(data_dir), mount)
    base = "root" if rel == os.curdir else epochfs._control.sanitize_name(rel.replace(os.sep, "."))
    key = (len(paths), hash(tuple(paths)))
    with _tags_lock:
        owners = _tags.setdefault((mount, base), [])
        if key not in owners:
            owners.append(key)
        n = owners.index(key) + 1
    return base, "" if n == 1 else ".%d" % n


def _named(base, suffix):
    # Cuts the base, not the suffix, so that a de-duplicated or per-rank name stays distinct.
    return base[:epochfs._control.NAME_MAX - len(suffix)] + suffix


def _reproducible(sampler):
    """Whether the order of ``sampler``'s next ``__iter__`` can be drawn ahead of it: a
    ``SequentialSampler``, or a sampler drawing from its own ``torch.Generator``. Not one with
    ``set_epoch``: its next order depends on an epoch not set yet."""
    if hasattr(sampler, "set_epoch"):
        return False
    return (isinstance(sampler, torch.utils.data.SequentialSampler)
            or isinstance(getattr(sampler, "generator", None), torch.Generator))


def _draw_ahead(sampler):
    """The order ``sampler``'s next ``__iter__`` gives: its generator is put back as it was,
    so that the real draw repeats this one."""
    generator = getattr(sampler, "generator", None)
    state = generator.get_state() if isinstance(generator, torch.Generator) else None
    try:
        return list(iter(sampler))
    finally:
        if state is not None:
            generator.set_state(state)


def _fingerprint(order):
    # Enough to tell a draw from the one published ahead, without keeping a second copy.
    return len(order), hash(tuple(int(i) for i in order))


class _Publisher:
    """Publishes orders of one stream to the mount holding ``data_dir``, or does nothing
    (after one warning) when there is no such mount. Names: see the module's docstring."""

    def __init__(self, data_dir, paths, *, stream=None, rank=None, strict=None):
        self.mount = epochfs.find_mount(data_dir)
        self.paths = [os.fspath(p) for p in paths]
        # Fixed here, in the main process: a worker or a changed environment changes nothing.
        self.job = epochfs.job_id()
        self.strict = _strict(strict)
        self.stream = self.manifest = None
        self.manifest_set = False
        self.published = set()
        self.publish_failures = 0
        if self.mount is None:
            if self.strict:
                raise FileNotFoundError(errno.ENOENT, "not on an epochfs mount, so the order "
                                        "cannot be published (strict)", os.fspath(data_dir))
            warnings.warn("%s is not on an epochfs mount: the order is not published" % data_dir,
                          RuntimeWarning, stacklevel=3)
        elif stream is not None:
            self.stream = self.manifest = stream
        else:
            base, suffix = _tag(self.mount, data_dir, self.paths)
            self.manifest = _named(base, suffix)
            self.stream = _named(base, suffix + ("" if rank is None else ".rank%d" % rank))
        # Now, not at the first epoch's start: an order drawn as its epoch starts (a
        # RandomSampler's) is then only indices, and the first copies start that much sooner.
        self._attempt(self._set_manifest)

    @property
    def active(self):
        return self.mount is not None

    def wants(self, epoch):
        """Whether ``publish(epoch, ...)`` would publish: saves drawing an order for nothing."""
        return self.active and epoch not in self.published

    def publish(self, epoch, indices, again=False, restart=False):
        """Publishes ``epoch``'s order, unless it was already (``again``: even then).
        ``restart``: the epochs published before it are dropped (see :func:`epochfs.publish`)."""
        if self.mount is None or (epoch in self.published and not again):
            return
        if restart or (self.published and epoch < max(self.published)):
            # A rerun or a restart from a checkpoint: the daemon restarts the stream at this
            # epoch and drops the newer ones, which must then be published again.
            self.published = set()
        # Counted as published even if it fails: a refused epoch is not retried at every call.
        self.published.add(epoch)
        # Epochs behind the newest two will not be published again: forget them.
        self.published = {e for e in self.published if e >= epoch - 1}

        def publish():
            self._set_manifest()
            epochfs.publish(self.mount, [int(i) for i in indices], epoch=epoch,
                            stream=self.stream, job=self.job, manifest=self.manifest,
                            restart=restart)
        self._attempt(publish)

    def _set_manifest(self):
        if self.mount is not None and not self.manifest_set:
            epochfs.set_manifest(self.mount, [self._absolute(p) for p in self.paths],
                                 name=self.manifest, job=self.job)
            self.manifest_set = True

    def _attempt(self, publish):
        try:
            publish()
        except (OSError, ValueError) as e:
            # A hint failed, never the training run: a refusal (a limit, a bad name), an
            # unwritable control dir, a full disk, or a mount gone.
            self.publish_failures += 1
            if self.strict:
                raise
            if self.publish_failures == 1:
                warnings.warn(
                    "epochfs: publishing stream %s (job %s) to %s failed: %s; training "
                    "continues without prefetch for this loader (later failures are not "
                    "reported)" % (self.stream, self.job, self.mount, e),
                    RuntimeWarning, stacklevel=4)

    def _absolute(self, path):
        return path if os.path.isabs(path) else os.path.join(self.mount, path)

    def __getstate__(self):
        # Samplers are pickled into DataLoader workers, which never publish.
        state = dict(self.__dict__)
        state["mount"] = None
        return state


class _Names:
    """What a sampler publishes under, read from its publisher (None when not on a mount)."""

    job = property(lambda self: self._publisher.job)
    stream = property(lambda self: self._publisher.stream)
    manifest = property(lambda self: self._publisher.manifest)
    publish_failures = property(lambda self: self._publisher.publish_failures)


# Indices per published window of a sampler that never ends (PublishingSampler's window).
DEFAULT_WINDOW = 8192


class PublishingSampler(_Names, torch.utils.data.Sampler):
    """Wraps any sampler: at each ``__iter__`` it materialises the epoch's order, publishes
    it, and yields exactly the indices the wrapped sampler yields.

    Ahead of time where the wrapped sampler allows it: a ``SequentialSampler``, or a sampler
    with its own ``generator`` (``RandomSampler(..., generator=g)``) and no ``set_epoch``.
    Then the first epoch is published when the wrapper is made, and each ``__iter__`` also
    publishes the next epoch, drawn ahead with the generator's state saved and restored, so
    that the real draw gives the same order and is not published again. Without a generator,
    ``RandomSampler`` seeds each draw afresh: its order is published at ``__iter__`` only.

    ``paths[i]`` is the file of sample ``i`` (absolute, or relative to the mount's root).
    Epochs are numbered from 0 in the order of ``__iter__`` calls, or set by ``set_epoch``.
    The stream and the manifest are named after the data dir (``train`` for
    ``<mount>/train``), or ``stream`` if given. ``strict``: raise when publishing fails
    instead of warning once (default: ``EPOCHFS_STRICT=1`` in the environment).
    ``job``, ``stream``, ``manifest`` and ``publish_failures`` are read-only attributes.

    A sampler with no ``__len__`` never ends (iteration-based training: Detectron2's
    ``TrainingSampler``, mmengine's ``InfiniteSampler``): its indices are published in windows
    of ``window`` indices (default ``DEFAULT_WINDOW``), each window as the next epoch and the
    one after it ahead, as the loader takes them. ``window=N`` does the same for any sampler.
    """

    def __init__(self, sampler, data_dir, paths, *, stream=None, strict=None, window=None):
        self.sampler = sampler
        self.epoch = 0
        self._explicit_epoch = False
        self._publisher = _Publisher(data_dir, paths, stream=stream, strict=strict)
        # (epoch, fingerprint) of the order published ahead of its __iter__, if any.
        self._ahead = None
        # A sampler without a length never ends (Detectron2's TrainingSampler, mmengine's
        # InfiniteSampler): its indices are published in windows, each as an epoch.
        self.window = window if window is not None else (
            None if hasattr(sampler, "__len__") else DEFAULT_WINDOW)
        if self.window is not None and self.window < 1:
            raise ValueError("window must be at least 1, not %r" % (window,))
        # The job's start-up (CUDA, the model, a checkpoint) gives the stager a head start.
        if self.window is None:
            self._publish_ahead(self.epoch)

    def set_epoch(self, epoch):
        self.epoch = epoch
        self._explicit_epoch = True
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    # The wrapped sampler's generator, read and set through the wrapper: Hugging Face
    # Accelerate synchronises ``sampler.generator`` between processes.
    generator = property(lambda self: getattr(self.sampler, "generator", None),
                         lambda self, g: setattr(self.sampler, "generator", g))

    def __iter__(self):
        if self.window is not None:
            return self._windows()
        order = list(iter(self.sampler))
        ahead = self._ahead
        if not self._was_published_ahead(order):
            # Every other draw is published, the same epoch's too: a new draw may be a new
            # order, and the trainer starts it from the first entry either way. An epoch
            # published ahead that this draw is not (set_epoch moved on, or the generator was
            # reseeded) will not be read: it is dropped.
            self._publisher.publish(self.epoch, order, again=True, restart=ahead is not None)
        drawn = self.epoch
        if not self._explicit_epoch:
            self.epoch += 1
        self._explicit_epoch = False
        # Staging then runs on across the end of this epoch.
        self._publish_ahead(drawn + 1)
        return iter(order)

    def _windows(self):
        """Yields the wrapped sampler's indices, publishing them ``window`` at a time, each
        window as the next epoch, and the window after it ahead as the one after that. A
        generator: an iterator the DataLoader drops unstarted draws nothing."""
        self._explicit_epoch = False
        indices = iter(self.sampler)
        window = list(itertools.islice(indices, self.window))
        if window:
            self._publisher.publish(self.epoch, window, again=True)
        while window:
            ahead = list(itertools.islice(indices, self.window))
            if ahead:
                self._publisher.publish(self.epoch + 1, ahead, again=True)
            yield from window
            window = ahead
            self.epoch += 1

    def _was_published_ahead(self, order):
        ahead, self._ahead = self._ahead, None
        return ahead is not None and ahead == (self.epoch, _fingerprint(order))

    def _publish_ahead(self, epoch):
        if not self._publisher.active or not _reproducible(self.sampler):
            return
        order = _draw_ahead(self.sampler)
        self._publisher.publish(epoch, order, again=True)
        self._ahead = (epoch, _fingerprint(order))

    def __len__(self):
        return len(self.sampler)


class PublishingBatchSampler(_Names, torch.utils.data.Sampler):
    """Wraps a batch sampler, one that yields lists of indices (``BatchSampler``, or a grouped
    or length-bucketed sampler of a detection or language model): at each ``__iter__`` it
    materialises the epoch's batches, publishes their indices in the order the loader will
    read them, and yields exactly those batches. For ``DataLoader(batch_sampler=...)``.

    ``paths``, ``stream``, ``strict``, ``set_epoch`` and the read-only attributes as for
    :class:`PublishingSampler`; ``sampler`` and ``generator`` are the wrapped batch sampler's
    own sampler and its generator. Each epoch is published when it is drawn, not ahead: a
    batch sampler may shuffle on its own, so its next draw is not known before it is made.
    """

    def __init__(self, batch_sampler, data_dir, paths, *, stream=None, strict=None):
        self.batch_sampler = batch_sampler
        self.epoch = 0
        self._explicit_epoch = False
        self._publisher = _Publisher(data_dir, paths, stream=stream, strict=strict)

    sampler = property(lambda self: getattr(self.batch_sampler, "sampler", None))
    generator = property(lambda self: getattr(self.sampler, "generator", None))

    def set_epoch(self, epoch):
        self.epoch = epoch
        self._explicit_epoch = True
        for inner in (self.batch_sampler, self.sampler):
            if hasattr(inner, "set_epoch"):
                inner.set_epoch(epoch)
                break

    def __iter__(self):
        # A generator, as BatchSampler's is: the DataLoader (torch 1.13, with workers) calls
        # iter() twice at an epoch's start and drops the first iterator unstarted, which must
        # then draw and publish nothing.
        batches = [list(batch) for batch in self.batch_sampler]
        self._publisher.publish(self.epoch, [i for batch in batches for i in batch], again=True)
        if not self._explicit_epoch:
            self.epoch += 1
        self._explicit_epoch = False
        yield from batches

    def __len__(self):
        return len(self.batch_sampler)


class DistributedPublishingSampler(_Names, torch.utils.data.DistributedSampler):
    """``DistributedSampler`` that publishes its rank's order as its own stream.

    Same constructor arguments and the same order for a given seed, epoch, rank,
    num_replicas, shuffle and drop_last. The order is a function of seed and epoch, so the
    next epoch's order is published ahead of time: epochfs stages across the epoch boundary.
    The first epoch's order is published when the sampler is made, during the job's start-up.
    ``data_dir``, ``paths`` and ``strict`` come after the usual arguments (``paths`` defaults
    to :func:`dataset_paths` of the dataset; ``strict`` as for :class:`PublishingSampler`).
    The stream is ``<tag>.rank<rank>`` (``train.rank1`` for rank 1 of ``<mount>/train``), the
    manifest ``<tag>``; all ranks of a torchrun or Slurm step share one job.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, *, data_dir, paths=None, strict=None):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last)
        if paths is None:
            paths = dataset_paths(dataset)
        self._publisher = _Publisher(data_dir, paths, rank=self.rank, strict=strict)
        self._iterated = False
        # The job's start-up (CUDA, the model, a checkpoint) gives the stager a head start.
        self._publish(self.epoch)

    def _order(self, epoch):
        saved, self.epoch = self.epoch, epoch
        try:
            return list(super().__iter__())
        finally:
            self.epoch = saved

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self._publish_from(epoch)

    def _publish_from(self, epoch):
        # Before the first __iter__, an epoch not published yet means the run starts elsewhere
        # than the sampler was made for (a resume from a checkpoint): the epoch published at
        # construction will not be read, and is dropped.
        restart = not self._iterated and bool(self._publisher.published)
        self._publish(epoch, restart=restart)
        self._publish(epoch + 1)

    def _publish(self, epoch, restart=False):
        # An epoch already published is not published again, nor its order drawn.
        if self._publisher.wants(epoch):
            self._publisher.publish(epoch, self._order(epoch), restart=restart)

    def __iter__(self):
        self._publish_from(self.epoch)
        self._iterated = True
        return iter(self._order(self.epoch))


def publishing(loader, data_dir=None, paths=None, *, strict=None):
    """One line for an existing ``DataLoader``: the same loader (dataset, batch size, workers,
    collate, everything) whose sampler publishes each epoch's order::

        loader = epochfs.torch.publishing(DataLoader(dataset, shuffle=True, batch_size=256,
                                                     num_workers=8))

    ``shuffle=True`` and explicit samplers are wrapped in :class:`PublishingSampler`, a
    ``DistributedSampler`` becomes a :class:`DistributedPublishingSampler` of the same
    arguments, and a custom ``batch_sampler`` is wrapped in :class:`PublishingBatchSampler`.
    ``data_dir`` defaults to the dataset's ``root`` (``ImageFolder`` and other
    ``DatasetFolder``), ``paths`` to :func:`dataset_paths`; ``strict`` as for
    :class:`PublishingSampler`. The loader must not have been iterated yet.
    """
    dataset = loader.dataset
    if data_dir is None:
        data_dir = getattr(dataset, "root", None)
        if data_dir is None:
            raise ValueError("publishing(): give data_dir, the directory the dataset reads "
                             "(the dataset has no root attribute)")
    paths = dataset_paths(dataset) if paths is None else paths
    options = dict(num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                   pin_memory=loader.pin_memory, timeout=loader.timeout,
                   worker_init_fn=loader.worker_init_fn,
                   multiprocessing_context=loader.multiprocessing_context,
                   generator=loader.generator, persistent_workers=loader.persistent_workers)
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    if _custom_batch_sampler(loader):
        batches = PublishingBatchSampler(loader.batch_sampler, data_dir, paths, strict=strict)
        return torch.utils.data.DataLoader(dataset, batch_sampler=batches, **options)
    sampler = loader.sampler
    if isinstance(sampler, torch.utils.data.DistributedSampler):
        sampler = DistributedPublishingSampler(
            dataset, num_replicas=sampler.num_replicas, rank=sampler.rank,
            shuffle=sampler.shuffle, seed=sampler.seed, drop_last=sampler.drop_last,
            data_dir=data_dir, paths=paths, strict=strict)
    else:
        sampler = PublishingSampler(sampler, data_dir, paths, strict=strict)
    return torch.utils.data.DataLoader(dataset, batch_size=loader.batch_size, sampler=sampler,
                                       drop_last=loader.drop_last, **options)


def _custom_batch_sampler(loader):
    """Whether the loader was given its own batch_sampler (not the one made from batch_size)."""
    b = loader.batch_sampler
    return b is not None and not (type(b) is torch.utils.data.BatchSampler
                                  and b.sampler is loader.sampler
                                  and b.batch_size == loader.batch_size)


def _generator(*parts):
    """A ``torch.Generator`` seeded from ``parts``: one independent stream per purpose, epoch
    and node, the same on every rank (``seed + epoch`` would make the stream of epoch 1 with
    seed 0 that of epoch 0 with seed 1)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


class _NodeParts:
    """Which samples each node holds in each epoch, for :class:`NodeAwareSampler`.

    One tensor of every sample index, node k's part at ``[starts[k], starts[k + 1])``; parts
    have ``size // num_nodes`` samples, the first ``size % num_nodes`` one more, in every
    epoch. Epoch 0: a seeded permutation of the dataset cut into those parts (with
    ``shuffle=False``, the indices in order). Epoch e > 0: each node gives away ``moves`` of
    its samples, drawn at random with the seed and e, to the other nodes in turn (node k's
    i-th to node (k + 1 + i mod (num_nodes - 1)) mod num_nodes), so each node receives exactly
    ``moves`` from the others in return. ``moves`` is ``round(exchange * (size // num_nodes))``.

    A step costs a permutation and a stable sort of the whole dataset (about 0.1 s per
    million samples on one core): every rank computes every node's part, with no
    communication. The two epochs asked for last are kept (8 bytes per sample each, and 4 for
    ``node_of``), so that a sampler asking for e and e + 1 each epoch takes one step per
    epoch; any other epoch is computed from the nearest one before it, from epoch 0 at worst
    (epoch 89 of 1.28 M samples: about 9 s, once, at a resume).
    """

    def __init__(self, size, num_nodes, seed, exchange, shuffle):
        if size < num_nodes:
            raise ValueError("%d samples cannot fill %d nodes" % (size, num_nodes))
        self.seed = seed
        self.shuffle = shuffle
        sizes = torch.full((num_nodes,), size // num_nodes, dtype=torch.long)
        sizes[:size % num_nodes] += 1
        self.starts = [0] + torch.cumsum(sizes, 0).tolist()
        self.node_of = torch.repeat_interleave(torch.arange(num_nodes, dtype=torch.int32), sizes)
        self.moves = round(exchange * (size // num_nodes)) if shuffle and num_nodes > 1 else 0
        self.deal = self._deal(num_nodes, self.moves)
        self.kept = {}  # epoch: every node's part, see at()

    def part(self, epoch, node):
        """The samples ``node`` holds in ``epoch``, a tensor in no particular order."""
        return self.at(epoch)[self.starts[node]:self.starts[node + 1]]

    def at(self, epoch):
        """Every node's part in ``epoch``: node k's at ``[starts[k], starts[k + 1])``."""
        if self.moves == 0:
            epoch = 0
        start = max((e for e in self.kept if e <= epoch), default=0)
        members = self.kept[start] if start in self.kept else self._first()
        for e in range(start + 1, epoch + 1):
            members = self._step(members, e)
        # The two epochs asked for last: e and e + 1 while a sampler publishes ahead.
        self.kept.pop(epoch, None)
        self.kept[epoch] = members
        if len(self.kept) > 2:
            del self.kept[next(iter(self.kept))]
        return members

    def _first(self):
        if not self.shuffle:
            return torch.arange(len(self.node_of))
        return torch.randperm(len(self.node_of), generator=_generator(self.seed, "parts"))

    def _step(self, members, epoch):
        """The parts of ``epoch`` from those of ``epoch - 1``."""
        # A random order within each part: the positions of a random permutation, stably
        # sorted by part; the first ``moves`` of each part then leave.
        shuffled = torch.randperm(len(members), generator=_generator(self.seed, "exchange", epoch))
        by_node = torch.sort(self.node_of[shuffled], stable=True).indices
        members = members[shuffled[by_node]]
        leaving = torch.tensor(self.starts[:-1]).unsqueeze(1) + torch.arange(self.moves)
        members[leaving] = members[leaving].flatten()[self.deal].view(leaving.shape)
        return members

    @staticmethod
    def _deal(num_nodes, moves):
        """Where the samples leaving the nodes go: ``given.flatten()[deal]``, viewed as
        (num_nodes, moves), is what each node receives, ``moves`` each, none its own."""
        if moves == 0:
            return None
        sender = torch.arange(num_nodes).repeat_interleave(moves)
        turn = torch.arange(moves).repeat(num_nodes)
        receiver = (sender + 1 + turn % (num_nodes - 1)) % num_nodes
        return torch.sort(receiver, stable=True).indices


def _ranks_per_node(ranks_per_node):
    if ranks_per_node is None:
        # torchrun's processes on this node; every node must run as many.
        ranks_per_node = os.environ.get("LOCAL_WORLD_SIZE")
        if ranks_per_node is None:
            raise ValueError("NodeAwareSampler: give ranks_per_node (LOCAL_WORLD_SIZE is not "
                             "set)")
    ranks_per_node = int(ranks_per_node)
    if ranks_per_node < 1:
        raise ValueError("ranks_per_node must be at least 1, not %d" % ranks_per_node)
    return ranks_per_node


def _fit(order, length):
    """``order`` cut to ``length``, or padded to it by repeating it from its start, as
    ``DistributedSampler`` pads the whole dataset."""
    if len(order) >= length:
        return order[:length]
    return (order * math.ceil(length / len(order)))[:length]


class NodeAwareSampler(DistributedPublishingSampler):
    """``DistributedSampler`` in which the ranks of a node read that node's part of the
    dataset, so that a node's cache, sized to its part, serves every epoch after the first.

    For jobs over many nodes whose dataset does not fit on one node's disk, or whose shared
    storage should be read about once (docs/user-guide.md, "Many nodes"). The arguments of
    ``DistributedSampler``, then:

    - ``ranks_per_node``: ranks (processes) per node, the same on every node; default
      torchrun's ``LOCAL_WORLD_SIZE``. Rank r is on node ``r // ranks_per_node`` (the
      ``node`` attribute) of ``num_replicas // ranks_per_node`` (``num_nodes``), as torchrun
      and Slurm number ranks.
    - ``exchange``: the fraction of each node's part that moves to other nodes at each new
      epoch, 0 to 1 (default 0.1). 0: a node keeps its part forever.
    - ``data_dir``, ``paths``, ``strict``: as for :class:`DistributedPublishingSampler`, and
      published the same way (epoch 0 when made, e + 1 ahead at ``set_epoch(e)``), each rank
      its own stream ``<tag>.rank<rank>``.

    What it promises, for a given dataset size, seed, epoch, num_replicas, ranks_per_node,
    exchange, shuffle and drop_last, on every rank alike and without communication (given the
    same torch version on every rank, as ``DistributedSampler`` needs too):

    - Each node holds a part of the dataset: ``len(dataset) // num_nodes`` samples, or one
      more; the parts of one epoch are disjoint and cover the dataset. Size node caches to
      hold ``(1 + exchange)`` parts: the part, and the samples arriving for the next epoch.
    - Each epoch the node's part is reshuffled and dealt to its ranks in turn, so that across
      all ranks an epoch reads every sample once. When ``len(dataset)`` is not a multiple of
      ``num_replicas``, every rank still gets ``len(self)`` samples, as from
      ``DistributedSampler``: a node repeats samples of its own part from the start of its
      order (the same number of repeats in all as ``DistributedSampler``'s padding), or with
      ``drop_last`` leaves out the end of its order (as many samples in all as it drops).
    - From epoch e to e + 1, each node gives ``round(exchange * (len(dataset) //
      num_nodes))`` samples of its part, drawn at random, to the other nodes, spread over
      them evenly, and receives as many from them.
    - ``shuffle=False``: the parts are consecutive ranges of indices, never exchanged, read
      in index order.

    Its orders are not those of ``DistributedSampler`` for the same seed. Computing a new
    epoch's parts takes about 0.1 s per million samples; see ``_NodeParts``.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, *, ranks_per_node=None, exchange=0.1, data_dir, paths=None,
                 strict=None):
        self.ranks_per_node = _ranks_per_node(ranks_per_node)
        if not 0 <= exchange <= 1:
            raise ValueError("exchange must be between 0 and 1, not %r" % (exchange,))
        self.exchange = exchange
        self._parts = None
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle,
                         seed=seed, drop_last=drop_last, data_dir=data_dir, paths=paths,
                         strict=strict)
        # Checks the layout off a mount too, where nothing was drawn yet.
        self._node_parts()

    node = property(lambda self: self.rank // self.ranks_per_node)

    @property
    def num_nodes(self):
        if self.num_replicas % self.ranks_per_node:
            raise ValueError("%d ranks do not make nodes of %d ranks" % (
                self.num_replicas, self.ranks_per_node))
        return self.num_replicas // self.ranks_per_node

    def _node_parts(self):
        if self._parts is None:
            self._parts = _NodeParts(len(self.dataset), self.num_nodes, self.seed,
                                     self.exchange, self.shuffle)
        return self._parts

    def _order(self, epoch):
        part = self._node_parts().part(epoch, self.node)
        if self.shuffle:
            part = part[torch.randperm(len(part), generator=_generator(
                self.seed, "order", epoch, self.node))]
        ours = _fit(part.tolist(), self.num_samples * self.ranks_per_node)
        return ours[self.rank % self.ranks_per_node::self.ranks_per_node]
