"""PyTorch samplers that publish the epoch's order to epochfs as they yield it.

Two lines in a training script::

    sampler = epochfs.torch.PublishingSampler(RandomSampler(dataset), data_dir,
                                              epochfs.torch.dataset_paths(dataset))
    loader = DataLoader(dataset, sampler=sampler, num_workers=8, batch_size=256)

or, for distributed training, ``DistributedPublishingSampler(dataset, ...)`` in place of
``DistributedSampler(dataset, ...)``. The index of a sample is its position in ``paths``;
the paths are published once as a manifest, and each epoch as indices into it.

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
order published ahead is not published again when its epoch starts.
"""

import itertools
import os
import threading
import warnings

import torch.utils.data

import epochfs

__all__ = ["DistributedPublishingSampler", "PublishingBatchSampler", "PublishingSampler",
           "dataset_paths"]


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
    base = "root" if rel == os.curdir else epochfs._sanitize_name(rel.replace(os.sep, "."))
    key = (len(paths), hash(tuple(paths)))
    with _tags_lock:
        owners = _tags.setdefault((mount, base), [])
        if key not in owners:
            owners.append(key)
        n = owners.index(key) + 1
    return base, "" if n == 1 else ".%d" % n


def _named(base, suffix):
    # Cuts the base, not the suffix, so that a de-duplicated or per-rank name stays distinct.
    return base[:epochfs._NAME_MAX - len(suffix)] + suffix


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
            warnings.warn("%s is not on an epochfs mount: the order is not published" % data_dir,
                          RuntimeWarning, stacklevel=3)
        elif stream is not None:
            self.stream = self.manifest = stream
        else:
            base, suffix = _tag(self.mount, data_dir, self.paths)
            self.manifest = _named(base, suffix)
            self.stream = _named(base, suffix + ("" if rank is None else ".rank%d" % rank))

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
        try:
            if not self.manifest_set:
                epochfs.set_manifest(self.mount, [self._absolute(p) for p in self.paths],
                                     name=self.manifest, job=self.job)
                self.manifest_set = True
            epochfs.publish(self.mount, [int(i) for i in indices], epoch=epoch,
                            stream=self.stream, job=self.job, manifest=self.manifest,
                            restart=restart)
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
                    RuntimeWarning, stacklevel=3)

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
