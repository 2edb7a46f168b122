"""Byte ranges of samples in single-file datasets, for :func:`epochfs.publish_ranges`.

A dataset that is one large file read by sample (a ``.npy`` array, an HDF5 dataset, an LMDB
database) gains from the known order as a folder of files does once epochfs knows where each
sample's bytes lie. Each function here reads only the file's own metadata (a header, a chunk
index, an LMDB tree's leaves) and returns, for the sample indices (or keys) given,
in that order, the ranges ``(path, offset, length)`` to publish::

    order = list(sampler)                       # this epoch's sample indices
    epochfs.publish_ranges(mount, epochfs.ranges.npy(path, order), epoch=e)

numpy, h5py and py-lmdb are imported by the function that needs them, so this module loads
without them. :func:`for_indices` adapts any other format: give it ``ranges_of(index)``.
"""

import os

__all__ = ["for_indices", "hdf5", "lmdb", "npy"]


def for_indices(ranges_of, indices):
    """The ranges of the samples ``indices``, in order, from ``ranges_of(index)``: one range
    ``(path, offset, length)`` or a list of them (a sample spread over several places)."""
    out = []
    for i in indices:
        r = ranges_of(i)
        if r and isinstance(r[0], (list, tuple)):
            out.extend(r)
        else:
            out.append(r)
    return out


def npy(path, indices):
    """Rows ``indices`` of the ``.npy`` file at ``path`` (C order; a row is ``array[i]``)."""
    import numpy

    with open(path, "rb") as f:
        version = numpy.lib.format.read_magic(f)
        shape, fortran, dtype = numpy.lib.format._read_array_header(f, version)
        start = f.tell()
    if fortran and len(shape) > 1:
        raise ValueError("%s is in Fortran order: a row is not one range" % path)
    if dtype.hasobject:
        raise ValueError("%s holds Python objects, not fixed-size rows" % path)
    row = dtype.itemsize
    for n in shape[1:]:
        row *= n
    return [(path, start + int(i) * row, row) for i in indices]


def hdf5(path, dataset, indices, *, merge=True):
    """Rows ``indices`` (along the first axis) of ``dataset`` in the HDF5 file at ``path``.

    A contiguous dataset's row is one range. A chunked one's row lies in the chunk holding it,
    which is read whole (and decompressed) to read the row: the range is that chunk. Rows of
    one chunk read in a row are one range, unless ``merge`` is False: one range per index, as
    :func:`epochfs.set_range_manifest` needs (its index ``i`` names ``ranges[i]``).
    """
    import h5py

    with h5py.File(path, "r") as f:
        d = f[dataset]
        if d.chunks is None:
            start = d.id.get_offset()
            if start is None:
                raise ValueError("%s:%s has no storage yet" % (path, dataset))
            row = d.dtype.itemsize
            for n in d.shape[1:]:
                row *= n
            return [(path, start + int(i) * row, row) for i in indices]
        rows = d.chunks[0]
        chunks = {}  # first row of a chunk -> (offset, size)
        out = []
        for i in indices:
            first = int(i) // rows * rows
            if first not in chunks:
                info = d.id.get_chunk_info_by_coord((first,) + (0,) * (len(d.shape) - 1))
                chunks[first] = (info.byte_offset, info.size)
            offset, size = chunks[first]
            if not merge or not out or out[-1] != (path, offset, size):
                out.append((path, offset, size))
        return out


def lmdb(path, keys, subdir=True):
    """The records ``keys`` (bytes) of the LMDB environment at ``path`` (a directory holding
    ``data.mdb``, or with ``subdir=False`` the data file itself): where each value lies in the
    data file. Missing keys are left out. For many keys, read from the tree's pages alone;
    for fewer keys than the tree has leaves, or a file not in LMDB 0.9's format, looked up
    through py-lmdb (each record's first page read)."""
    import lmdb as py_lmdb

    from epochfs import _lmdb_pages

    data = os.path.join(path, "data.mdb") if subdir else path
    keys = list(keys)
    env = py_lmdb.open(path, subdir=subdir, readonly=True, lock=False)
    try:
        found = _lmdb_pages.records(data) if len(keys) >= env.stat()["leaf_pages"] else None
        if found is not None:
            return [(data,) + found[k] for k in keys if k in found]
        return _looked_up(env, data, keys)
    finally:
        env.close()


def _looked_up(env, data, keys):
    import numpy

    maps = _mappings_of(os.path.realpath(data))
    out = []
    with env.begin(buffers=True) as txn:
        for key in keys:
            value = txn.get(key)
            if value is None:
                continue
            # The value is a view of the map: where it lies in the map is where it lies in
            # the file.
            addr = numpy.frombuffer(value, dtype=numpy.uint8).__array_interface__["data"][0]
            out.append((data, _file_offset(maps, addr, data), len(value)))
    return out


def _mappings_of(path):
    """This process's memory maps of the file at path: (start, end, file offset) each."""
    out = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].rstrip("\n") == path:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                out.append((start, end, int(fields[2], 16)))
    return out


def _file_offset(maps, addr, path):
    for start, end, offset in maps:
        if start <= addr < end:
            return offset + addr - start
    raise ValueError("a record of %s is not in its memory map" % path)
