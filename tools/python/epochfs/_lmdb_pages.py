"""Where each record of an LMDB database lies in its data file, read from the file's pages.

Found through py-lmdb instead, each lookup faults in the record's own first page through the
memory map (measured: a 100 MB database of 25,000 records read whole, one fault at a time),
which on shared storage is the whole dataset read before the first epoch. Here only the
tree's branch and leaf pages are read, level by level, many at once: a leaf names each
value's place (inline in the leaf, or on overflow pages) without touching it.

The format is LMDB 0.9's (lmdb's mdb.c), 64-bit. Anything else found (another magic or
version, a database of duplicate keys, sub-databases, a page not where the tree says) gives
None, and the caller looks the records up through py-lmdb.
"""

import os
import struct
from concurrent.futures import ThreadPoolExecutor

# A page: its number (8 bytes), padding (2), flags (2), the bounds of its free space (2 + 2),
# then the offsets of its nodes (2 bytes each).
_HEADER = 16
_BRANCH, _LEAF = 0x01, 0x02
_OTHER = 0x04 | 0x08 | 0x20 | 0x40  # overflow, meta, fixed-size duplicates, sub-page
# A meta page (pages 0 and 1), after the header: magic, version (4 + 4), map address and
# size (8 + 8), two trees' records of 48 bytes (the free pages', the main one's), the last
# page and the transaction id (8 + 8). In a tree's record: flags at 4, depth at 6, entries
# at 32, root page at 40.
_MAGIC, _VERSION = 0xBEEFC0DE, 1
_MAIN = _HEADER + 24 + 48
_TXNID = _HEADER + 24 + 96 + 8
_DUPSORT = 0x04
# A node: two halves of the data size (or, in a branch, of the child's page number, with the
# flags as its top 16 bits), flags, key size (2 each); then the key, then the data.
_NODE = 8
_BIGDATA, _SUBDATA, _DUPDATA = 0x01, 0x02, 0x04
_PARALLEL_READS = 32
_MAX_DEPTH = 32  # lmdb's own cursor stack (CURSOR_STACK)


class _Unexpected(Exception):
    pass


def records(data):
    """{key: (offset, length)} of every record in the main database of the LMDB data file
    ``data``, or None where the file is not in the format read here."""
    fd = os.open(data, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # each page, not a window around it
        return _walk(fd)
    except (_Unexpected, struct.error, OSError):
        return None
    finally:
        os.close(fd)


def _walk(fd):
    psize, root, depth, entries = _main_tree(fd)
    if depth == 0 and entries == 0:
        return {}
    if depth > _MAX_DEPTH:
        raise _Unexpected()
    found, level = {}, [root]
    with ThreadPoolExecutor(_PARALLEL_READS) as pool:
        for _ in range(depth):
            # A corrupt branch naming a page twice (itself, or a sibling) could multiply a
            # level's pages past the file's; pages beyond the file's end read short.
            if len(set(level)) != len(level):
                raise _Unexpected()
            pages = list(pool.map(lambda n: (n, os.pread(fd, psize, n * psize)), level))
            level = []
            for number, page in pages:
                level.extend(_page(number, page, psize, found))
            if not level:
                break
    if level or len(found) != entries:
        raise _Unexpected()
    return found


def _main_tree(fd):
    """Page size, root page, depth and entries of the main tree, from the newer meta page."""
    first = os.pread(fd, _TXNID + 8, 0)
    psize = struct.unpack_from("<I", first, _HEADER + 24)[0]  # the free tree's padding: psize
    if psize < 512 or psize & (psize - 1):
        raise _Unexpected()
    metas = [first, os.pread(fd, _TXNID + 8, psize)]
    meta = max(metas, key=lambda m: struct.unpack_from("<Q", m, _TXNID)[0])
    magic, version = struct.unpack_from("<II", meta, _HEADER)
    flags, depth = struct.unpack_from("<HH", meta, _MAIN + 4)
    entries, root = struct.unpack_from("<QQ", meta, _MAIN + 32)
    if magic != _MAGIC or version != _VERSION or flags & _DUPSORT:
        raise _Unexpected()
    return psize, root, depth, entries


def _page(number, page, psize, found):
    """A branch page's children; a leaf page's records added to found (none returned)."""
    pgno, flags, lower = struct.unpack_from("<Q2xHH", page)
    if len(page) != psize or pgno != number or flags & _OTHER or not flags & (_BRANCH | _LEAF):
        raise _Unexpected()
    children = []
    for i in range((lower - _HEADER) // 2):
        at = struct.unpack_from("<H", page, _HEADER + 2 * i)[0]
        lo, hi, node_flags, ksize = struct.unpack_from("<HHHH", page, at)
        if flags & _BRANCH:
            children.append(lo | hi << 16 | node_flags << 32)
            continue
        if node_flags & (_SUBDATA | _DUPDATA):
            raise _Unexpected()
        end_of_key, length = at + _NODE + ksize, lo | hi << 16
        if node_flags & _BIGDATA:  # on overflow pages, after their header
            offset = struct.unpack_from("<Q", page, end_of_key)[0] * psize + _HEADER
        elif end_of_key + length <= psize:
            offset = number * psize + end_of_key
        else:
            raise _Unexpected()
        found[page[at + _NODE:end_of_key]] = (offset, length)
    return children
