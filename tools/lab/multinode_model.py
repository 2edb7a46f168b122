#!/usr/bin/python3
"""Storage reads of a job over many nodes: an analytic model, checked by exact simulation.

Lab code (issue 22), not shipped. Run with Debian's /usr/bin/python3 from the source tree. The
model needs numpy only; the simulation also torch, for the samplers' own orders
(``DistributedSampler``, and ``epochfs.torch``'s node parts). Results: docs/benchmarks.md,
"Many nodes: storage reads, modelled and simulated"; the decision on peer fetching:
docs/design.md, "Many nodes: node-aware orders, not peer fetching".

What is counted. A dataset of D files of one size; N nodes of one rank each (more ranks per
node change nothing: a node's ranks share its reads and its cache); each node's cache holds C
files. A storage read is a file a node reads that its cache does not hold at that moment (with
peer fetching: that no node's cache holds). Staging ahead only moves such reads earlier, so
the counts are those of the eviction policy on its own. Figures are fractions of D, summed
over the nodes: 1.0 is the dataset read once.

The policies:

- known future: epochfs's (Belady's MIN with bypass: evict the file needed farthest ahead,
  admit none needed later than that; files no order names go first, LRU among them), knowing
  the current epoch and the next, as a sampler publishing e + 1 when e starts gives it;
- LRU: no orders.

The orders:

- global: ``DistributedSampler``, each node a fresh uniform random D/N each epoch;
- node-aware: ``NodeAwareSampler``, each node a part of D/N, of which round(x * D/N) leave
  for the other nodes each epoch (x the exchange) and as many arrive;
- peer fetching: global orders, but a node that misses fetches from a peer's cache when one
  holds the file (NoPFS, HVAC, CoorDL); each file is kept by the node that read it in epoch 1
  (its home), so the caches hold min(D, N * C) distinct files between them.

Subcommands, each printing a Markdown table: ``model`` (1 to 1,024 nodes over 90 epochs),
``validate`` (the model beside the simulation at small scale), ``peers`` (peer fetching
against node-aware orders, 8 to 1,024 nodes over 90 epochs), ``peers-validate`` (the same
beside the simulation, at a smaller dataset).
"""

import argparse
import collections
import heapq
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NEVER = math.inf
CACHES = {"1": 1.0, "1.1": 1.1, "2": 2.0, "0.5": 0.5}  # multiples of D/N; "all": D


# ---------------------------------------------------------------------------------------------
# The model


def known_future_hits(reads, q, capacity, epochs):
    """Expected hits per epoch of one node's known-future cache of ``capacity`` files, when
    the node reads ``reads`` distinct files each epoch and each file is in the next epoch's
    set with probability ``q``, whatever the past (global orders: q = 1/N).

    Hits in epoch e are files held across the boundary into e, since each file is read once
    per epoch; so at most ``capacity`` (with q = 1 this is the single node's bound f). At
    that boundary the node can hold only files it held at the previous boundary or read
    since: ``pool`` = held + reads - hits of the previous epoch, each in epoch e's set with
    probability q. Knowing epoch e while it reads e - 1, the policy keeps exactly those,
    before anything with no known use, as long as they fit: hits = min(capacity, q * pool).
    The rest of the cache keeps files of no known use (LRU), so held = min(capacity, pool).
    Steady state: min(capacity, (capacity + reads) / (N + 1)) with q = 1/N.
    """
    hits = np.zeros(epochs)
    held = hit = 0.0
    for e in range(1, epochs):
        pool = held + reads - hit
        hit, held = min(capacity, q * pool), min(capacity, pool)
        hits[e] = hit
    return hits


def global_known(files, nodes, capacity, epochs):
    """Storage reads per epoch, fractions of the dataset: global orders, known future."""
    part = files / nodes
    hits = known_future_hits(part, 1 / nodes, capacity, epochs)
    return nodes * (part - hits) / files


def global_lru(files, nodes, capacity, epochs, grid=200):
    """Storage reads per epoch: global orders, LRU.

    LRU hits a file iff fewer than ``capacity`` other files were read since its last read.
    For a read at fraction u of epoch e, looking back w epochs covers a fraction phi_j of each
    epoch j, and a file is in a node's set of an epoch with probability q = 1/N, so about
    D * (1 - prod(1 - q * phi_j)) distinct files were read in that window: it grows with w,
    and w* is where it reaches ``capacity``. The file's previous read was i epochs back with
    probability q * (1 - q)^(i - 1), at a uniform position, so the read hits with probability
    sum_i q (1 - q)^(i - 1) * clip(w* - u - i + 1, 0, 1). Averaged over u on a grid.
    """
    q = 1 / nodes
    u = (np.arange(grid) + 0.5) / grid
    hit_rate = np.zeros(epochs)
    for e in range(1, epochs):
        back = np.arange(1, e + 1)
        wstar = _lru_reach(files, q, capacity, u, back)
        weight = q * (1 - q) ** (back - 1)
        reach = np.clip(wstar[:, None] - u[:, None] - back + 1, 0, 1)
        hit_rate[e] = (reach * weight).sum(1).mean()
        if np.all(np.isfinite(wstar)) and e > wstar.max() + 1:
            hit_rate[e:] = hit_rate[e]  # the window no longer reaches epoch 1
            break
    return 1 - hit_rate


def _lru_reach(files, q, capacity, u, back, steps=40):
    """w* for each position u: how far back, in epochs, the last ``capacity`` files reach."""
    def distinct(w):
        now = np.minimum(w, u)
        earlier = np.clip(w[:, None] - u[:, None] - (back - 1), 0, 1)
        return files * (1 - (1 - q * now) * np.prod(1 - q * earlier, axis=1))

    lo, hi = np.zeros_like(u), u + back[-1]
    unbounded = distinct(hi) < capacity
    for _ in range(steps):
        mid = (lo + hi) / 2
        inside = distinct(mid) < capacity
        lo, hi = np.where(inside, mid, lo), np.where(inside, hi, mid)
    return np.where(unbounded, np.inf, lo)


def node_aware(files, nodes, capacity, epochs, exchange, lru=False):
    """Storage reads per epoch: node-aware orders, known future (or LRU).

    Each epoch a node reads its part, P = D/N files, of which m = round(x * P) arrived from
    other nodes; the other P - m it read in the previous epoch too. Epoch 1 reads D. Later:

    - Known future: like the single node, it can keep min(capacity, P - m) of the files it
      keeps, so it reads P - capacity below (1 - x) * P and m from there up: the (1 + x) * P
      of the user guide is room to stage the arrivals ahead, not fewer reads.
    - LRU: a kept file read at fraction v of one epoch and u of the next hits iff fewer than
      ``capacity`` files were read in between: P * ((1 - v) + u - (1 - x) * (1 - v) * u),
      the rest of one epoch plus the start of the next less the files in both.
    - Returns: an arrival may be a file that left the node earlier and is still cached
      (``_returns``).
    """
    part = files // nodes
    moves = round(exchange * part) if nodes > 1 else 0
    if lru:
        kept = (part - moves) * _lru_kept(capacity / part, moves / part)
    else:
        kept = min(capacity, part - moves)
    reads = np.zeros(epochs)
    reads[0] = part
    held = [0.0, min(capacity, part)]  # the cache at the start of the last two epochs
    back = 0.0
    for e in range(1, epochs):
        back = _returns(files, part, moves, capacity, held, back, lru, kept if e > 1 else 0)
        reads[e] = part - kept - back
        held = [held[1], min(capacity, held[1] + reads[e])]
    return nodes * reads / files


def _returns(files, part, moves, capacity, held, back, lru, kept):
    """Arrivals of an epoch that the node still holds: files that left it earlier.

    The m arrivals are drawn at random from the other nodes' D - P files, so each cached
    file that is at another node arrives with probability m / (D - P). The known future
    sees the arrivals one epoch ahead and keeps those it holds at that epoch's start: the
    files then cached but not in that epoch's part (``held[0]``, less the files it keeps and
    the previous returns). LRU holds, at the start of the epoch, the part just read and the
    files that left before it (``held[1]`` - P), and the arrivals it does not hold displace
    those once it is full, half of them on average over the epoch.
    """
    if moves == 0:
        return 0.0
    if not lru:
        return moves * max(0.0, held[0] - kept - back) / (files - part)
    left = max(0.0, held[1] - part)
    new = moves * (1 - left / (files - part))
    overflow = max(0.0, held[1] + new - capacity)
    return moves * max(0.0, left - overflow * overflow / (2 * new)) / (files - part)


def _lru_kept(room, exchange, grid=400):
    """Probability that LRU with ``room`` parts of cache still holds a kept file."""
    u = (np.arange(grid) + 0.5) / grid
    v = u[:, None]
    between = (1 - v) + u - (1 - exchange) * (1 - v) * u
    return float((between < room).mean())


def peer_fetching(files, nodes, capacity, epochs):
    """(storage reads, peer transfers) per epoch, fractions of the dataset: global orders,
    each node keeping min(C, P) files it read in epoch 1 (its home files) and, with room to
    spare, the files of other homes by its known future.

    After epoch 1 the caches hold N * min(C, P) distinct files between them, so the storage
    serves the rest, D - N * min(C, P) per epoch, the least any scheme can (the union is one
    cache of N * C files over a stream that reads each file once per epoch: the single
    node's bound). A node reads its own home files with probability 1/N each, min(C, P) / N
    per epoch; files of other homes come from a peer unless its spare room holds them: that
    room sees P * (1 - 1/N) reads per epoch, each file in the next epoch's with
    probability 1/N, so ``known_future_hits`` applies, from epoch 2 on.
    """
    part = files / nodes
    home = min(capacity, part)
    spare = known_future_hits(part * (1 - 1 / nodes), 1 / nodes, max(0.0, capacity - part),
                              epochs - 1)
    storage = np.full(epochs, files - nodes * home)
    storage[0] = files
    local = nodes * (home / nodes + np.concatenate([[0.0], spare]))
    peer = files - storage - local
    peer[0] = 0.0
    return storage / files, peer / files


# ---------------------------------------------------------------------------------------------
# The simulation


def global_orders(files, nodes, epochs, seed):
    """orders[node][epoch]: torch's DistributedSampler, one rank per node."""
    from torch.utils.data import DistributedSampler

    out = []
    for rank in range(nodes):
        sampler = DistributedSampler(range(files), num_replicas=nodes, rank=rank, seed=seed)
        node = []
        for e in range(epochs):
            sampler.set_epoch(e)
            node.append(list(sampler))
        out.append(node)
    return out


def node_aware_orders(files, nodes, epochs, exchange, seed):
    """orders[node][epoch]: NodeAwareSampler's, one rank per node, from its _NodeParts.

    The same computation as NodeAwareSampler._order (tools/python/tests checks they agree),
    with the parts computed once for all nodes instead of once per rank.
    """
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import torch
    from epochfs.torch import _generator, _NodeParts

    if files % nodes:
        raise ValueError("the simulation wants files divisible by nodes (no padding)")
    parts = _NodeParts(files, nodes, seed, exchange, shuffle=True)
    out = [[] for _ in range(nodes)]
    for e in range(epochs):
        for node in range(nodes):
            part = parts.part(e, node)
            shuffle = torch.randperm(len(part), generator=_generator(seed, "order", e, node))
            out[node].append(part[shuffle].tolist())
    return out


def known_future_misses(epochs, capacity):
    """Per epoch, the files one node's known-future cache misses, given its orders.

    Belady's MIN with bypass over the current and the next epoch, as cachestore's
    NextUsePolicy: on a miss with the cache full, the victim is the file needed farthest
    ahead (files needed in neither epoch first, least recently used first among them); the
    missed file replaces it if needed sooner, or if neither is needed (LRU).
    """
    cache = {}  # file: its heap entry (-next use, last use if never needed, file)
    start = 0
    for e, order in enumerate(epochs):
        later = epochs[e + 1] if e + 1 < len(epochs) else []
        following = {f: start + len(order) + p for p, f in enumerate(later)}
        current = {f: start + p for p, f in enumerate(order)}
        heap = []
        for f, entry in list(cache.items()):  # epoch e + 1 is now known
            cache[f] = _entry(f, current.get(f, following.get(f)), -entry[1])
            heap.append(cache[f])
        heapq.heapify(heap)
        missed = []
        for p, f in enumerate(order):
            entry = _entry(f, following.get(f), start + p)
            if f not in cache:
                missed.append(f)
                if len(cache) >= capacity and not _evict_for(cache, heap, entry):
                    continue
            cache[f] = entry
            heapq.heappush(heap, entry)
        yield missed
        start += len(order)


def _entry(f, next_use, now):
    # The last use is kept negated so that, among files never needed, the oldest pops first.
    if next_use is None:
        return (-NEVER, -now, f)
    return (-next_use, -now, f)


def _evict_for(cache, heap, entry):
    """Evicts the farthest-needed file if ``entry`` is worth admitting; False if it is not."""
    if not cache:
        return False
    while cache.get(heap[0][2]) is not heap[0]:
        heapq.heappop(heap)  # stale: the file was read or evicted since
    victim = heap[0]
    never = entry[0] == victim[0] == -NEVER
    if not (-entry[0] < -victim[0] or never):
        return False
    heapq.heappop(heap)
    del cache[victim[2]]
    return True


def lru_misses(epochs, capacity):
    """Per epoch, the files one node's LRU cache misses."""
    cache = collections.OrderedDict()
    for order in epochs:
        missed = []
        for f in order:
            if f in cache:
                cache.move_to_end(f)
                continue
            missed.append(f)
            cache[f] = True
            if len(cache) > capacity:
                cache.popitem(last=False)
        yield missed


def simulate(orders, capacity, policy):
    """Storage reads per epoch, fractions of the dataset, summed over the nodes."""
    files = sum(len(node[0]) for node in orders)
    reads = np.zeros(len(orders[0]))
    for node in orders:
        for e, missed in enumerate(policy(node, capacity)):
            reads[e] += len(missed)
    return reads / files


def simulate_peers(orders, capacity):
    """(storage reads, peer transfers) per epoch with peer fetching, as ``peer_fetching``
    describes: home files are the first min(C, P) each node reads in epoch 1."""
    files = sum(len(node[0]) for node in orders)
    part = len(orders[0][0])
    home = {f: k for k, node in enumerate(orders) for f in node[0][:min(capacity, part)]}
    storage, peer = np.zeros(len(orders[0])), np.zeros(len(orders[0]))
    storage[0] = files
    for k, node in enumerate(orders):
        others = [[f for f in order if home.get(f) != k] for order in node[1:]]
        for e, missed in enumerate(known_future_misses(others, capacity - part), start=1):
            fetched = sum(1 for f in missed if f in home)
            peer[e] += fetched
            storage[e] += len(missed) - fetched
    return storage / files, peer / files


# ---------------------------------------------------------------------------------------------
# Tables


def cache_files(files, nodes, name):
    """A cache size given as a multiple of D/N ("1.1"), or "all" for the dataset."""
    return files if name == "all" else min(files, round(CACHES[name] * files / nodes))


def cache_label(name):
    return "the dataset" if name == "all" else "%s × D/N" % name


POLICIES = [
    ("global, LRU", lambda d, n, c, e, x: global_lru(d, n, c, e)),
    ("global, known future", lambda d, n, c, e, x: global_known(d, n, c, e)),
    ("node-aware, known future", lambda d, n, c, e, x: node_aware(d, n, c, e, x)),
    ("node-aware, LRU", lambda d, n, c, e, x: node_aware(d, n, c, e, x, lru=True)),
]


def print_model(args):
    print("Storage reads, fractions of the dataset (model): at epoch %d, and over %d epochs; "
          "node-aware with exchange %g\n" % (args.epochs, args.epochs, args.exchange))
    names = [cache_label(c) for c in args.caches]
    print("| N | orders, policy | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for nodes in args.nodes:
        for label, model in POLICIES:
            cells = []
            for name in args.caches:
                reads = model(args.files, nodes, cache_files(args.files, nodes, name),
                              args.epochs, args.exchange)
                cells.append("%.3f · %.1f" % (reads[-1], reads.sum()))
            print("| %d | %s | %s |" % (nodes, label, " | ".join(cells)))


def print_per_epoch(args):
    shown = sorted({e for e in (1, 2, 3, 5, 10, 30, 90) if e <= args.epochs} | {args.epochs})
    print("Storage reads per epoch, fractions of the dataset (model); node-aware with "
          "exchange %g\n" % args.exchange)
    print("| N | cache | orders, policy | " + " | ".join("%d" % e for e in shown)
          + " | %d epochs |" % args.epochs)
    print("|---|---|---|" + "---|" * (len(shown) + 1))
    for nodes in args.nodes:
        for name in args.caches:
            capacity = cache_files(args.files, nodes, name)
            for label, model in POLICIES:
                reads = model(args.files, nodes, capacity, args.epochs, args.exchange)
                cells = ["%.3f" % reads[e - 1] for e in shown] + ["%.1f" % reads.sum()]
                print("| %d | %s | %s | %s |" % (nodes, cache_label(name), label,
                                                 " | ".join(cells)))


def print_validation(args):
    print("Storage reads over %d epochs, fractions of the dataset: model / simulation; "
          "D = %d, node-aware with exchange %g\n" % (args.epochs, args.files, args.exchange))
    print("| N | cache | " + " | ".join(label for label, _ in POLICIES) + " |")
    print("|---|---|" + "---|" * len(POLICIES))
    worst = (0.0, "")
    for nodes in args.nodes:
        orders = {"global": global_orders(args.files, nodes, args.epochs, args.seed),
                  "node-aware": node_aware_orders(args.files, nodes, args.epochs,
                                                  args.exchange, args.seed)}
        for name in args.caches:
            capacity = cache_files(args.files, nodes, name)
            cells = []
            for label, model in POLICIES:
                predicted = model(args.files, nodes, capacity, args.epochs, args.exchange)
                policy = lru_misses if label.endswith("LRU") else known_future_misses
                measured = simulate(orders[label.split(",")[0]], capacity, policy)
                cells.append("%.2f / %.2f" % (predicted.sum(), measured.sum()))
                gap = np.abs(predicted - measured).max()
                if gap > worst[0]:
                    worst = (gap, "N = %d, %s, %s" % (nodes, cache_label(name), label))
            print("| %d | %s | %s |" % (nodes, cache_label(name), " | ".join(cells)))
    print("\nLargest difference in one epoch: %.3f of the dataset (%s)" % worst)


def print_peers_model(args):
    print("Peer fetching against node-aware orders (model), fractions of the dataset: "
          "at epoch %d · over %d epochs; node-aware with exchange %g\n"
          % (args.epochs, args.epochs, args.exchange))
    print("| N | cache | global, own cache: storage | peer fetching: storage | peer fetching: "
          "peer traffic | node-aware: storage |")
    print("|---|---|---|---|---|---|")
    for nodes in args.nodes:
        for name in args.caches:
            capacity = cache_files(args.files, nodes, name)
            storage, peer = peer_fetching(args.files, nodes, capacity, args.epochs)
            cells = [global_known(args.files, nodes, capacity, args.epochs), storage, peer,
                     node_aware(args.files, nodes, capacity, args.epochs, args.exchange)]
            print("| %d | %s | %s |" % (nodes, cache_label(name), " | ".join(
                "%.3f · %.1f" % (c[-1], c.sum()) for c in cells)))


def print_peers_validation(args):
    print("Over %d epochs, fractions of the dataset: model / simulation; D = %d, node-aware "
          "with exchange %g\n" % (args.epochs, args.files, args.exchange))
    print("| N | cache | peer fetching: storage | peer fetching: peer traffic | "
          "node-aware: storage |")
    print("|---|---|---|---|---|")
    for nodes in args.nodes:
        everywhere = global_orders(args.files, nodes, args.epochs, args.seed)
        near = node_aware_orders(args.files, nodes, args.epochs, args.exchange, args.seed)
        for name in args.caches:
            capacity = cache_files(args.files, nodes, name)
            storage, peer = peer_fetching(args.files, nodes, capacity, args.epochs)
            sim_storage, sim_peer = simulate_peers(everywhere, capacity)
            ours = node_aware(args.files, nodes, capacity, args.epochs, args.exchange)
            sim_ours = simulate(near, capacity, known_future_misses)
            pairs = [(storage, sim_storage), (peer, sim_peer), (ours, sim_ours)]
            print("| %d | %s | %s |" % (nodes, cache_label(name), " | ".join(
                "%.2f / %.2f" % (a.sum(), b.sum()) for a, b in pairs)))


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["model", "validate", "peers", "peers-validate"])
    p.add_argument("--files", type=int, help="D (default: 1,281,167 for the model, "
                   "20,000 for validate, 51,200 for peers-validate)")
    p.add_argument("--nodes", type=lambda s: [int(n) for n in s.split(",")])
    p.add_argument("--epochs", type=int)
    p.add_argument("--caches", type=lambda s: s.split(","),
                   help="per node, multiples of D/N (%s) or 'all'" % ",".join(CACHES))
    p.add_argument("--exchange", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-epoch", action="store_true",
                   help="model: every policy's reads at a few epochs, a row per cache size")
    args = p.parse_args()
    defaults = {
        "model": (1281167, [1, 2, 4, 8, 64, 1024], 90, ["1", "1.1", "2", "all"]),
        "validate": (20000, [2, 4, 8, 16], 10, ["1", "1.1", "2", "all"]),
        "peers": (1281167, [8, 64, 256, 1024], 90, ["0.5", "1", "1.1", "all"]),
        "peers-validate": (51200, [8, 64, 1024], 10, ["0.5", "1.1", "2"]),
    }[args.what]
    for key, value in zip(("files", "nodes", "epochs", "caches"), defaults):
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main():
    args = parse()
    if args.what == "model" and args.per_epoch:
        print_per_epoch(args)
        return
    {"model": print_model, "validate": print_validation, "peers": print_peers_model,
     "peers-validate": print_peers_validation}[args.what](args)


if __name__ == "__main__":
    main()
