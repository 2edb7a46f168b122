#!/usr/bin/python3
"""Node-aware orders against global shuffling: test accuracy per epoch of a small model.

Lab code (issue 22), not shipped. Run with Debian's /usr/bin/python3 (python3-torch) from the
source tree; it needs scikit-learn for its dataset (Debian: python3-sklearn). No mount: the
samplers run off epochfs, where they only draw orders.

The setup:

- the data: scikit-learn's digits (1,797 8x8 images, 10 classes), a stratified 75/25 split
  into train and test, features standardised on the train part;
- the model: an MLP, 64 -> 128 -> BatchNorm -> ReLU -> 10 (--no-batchnorm: without it),
  SGD with momentum;
- data-parallel training over --nodes x --ranks-per-node ranks, emulated in one process as
  DistributedDataParallel runs it: each rank's batch of --batch samples goes forward on its
  own (BatchNorm normalises with that rank's batch alone), the ranks' gradients are averaged,
  one optimizer step; BatchNorm's running statistics are rank 0's (DDP broadcasts rank 0's
  buffers at each forward), and they are what the test accuracy is measured with;
- the orders: torch's ``DistributedSampler`` (global shuffling), and
  ``epochfs.torch.NodeAwareSampler`` with each --exchange, starting from node parts drawn at
  random (as the sampler draws them) or from the dataset sorted by class (as shards written
  class by class would give a node: a few classes each, the non-IID stress case);
- --seeds runs of each (the seed sets the model's initialisation and the orders).

Prints, per configuration, the mean and the standard deviation over the seeds of the test
accuracy at a few epochs; --json writes every epoch's figures, --plot a PNG of the means
(gnuplot). Results: docs/benchmarks.md, "Node-aware orders: accuracy".
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from epochfs.torch import NodeAwareSampler  # noqa: E402


def load_digits():
    """(train x, train y, test x, test y) as tensors, the train part sorted by class."""
    try:
        from sklearn.datasets import load_digits as digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        sys.exit("node_shuffle_accuracy.py needs scikit-learn: apt-get install python3-sklearn")
    x, y = digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, stratify=y,
                                                        random_state=0)
    order = y_train.argsort(kind="stable")
    x_train, y_train = x_train[order], y_train[order]
    mean, std = x_train.mean(0), x_train.std(0) + 1e-6  # some pixels are always 0
    return (torch.tensor((x_train - mean) / std, dtype=torch.float32), torch.tensor(y_train),
            torch.tensor((x_test - mean) / std, dtype=torch.float32), torch.tensor(y_test))


class ClassSortedStart(NodeAwareSampler):
    """Node-aware orders whose epoch-0 parts are cut from the dataset in index order (here
    sorted by class) instead of at random: each node starts with a few classes. Lab code may
    reach into the sampler: its epoch 0 is the one thing replaced, before anything is drawn."""

    def _node_parts(self):
        parts = super()._node_parts()
        parts._first = lambda: torch.arange(len(self.dataset))
        return parts


def samplers(config, size, args, seed):
    """One sampler per rank for ``config`` ("global", or "random"/"sorted" with exchange)."""
    world = args.nodes * args.ranks_per_node
    if config["start"] == "global":
        return [DistributedSampler(range(size), world, r, seed=seed) for r in range(world)]
    kind = ClassSortedStart if config["start"] == "sorted" else NodeAwareSampler
    paths = ["%d" % i for i in range(size)]
    return [kind(range(size), world, r, seed=seed, ranks_per_node=args.ranks_per_node,
                 exchange=config["exchange"], data_dir=args.off_mount, paths=paths)
            for r in range(world)]


def model_for(seed, batchnorm):
    torch.manual_seed(seed)
    norm = torch.nn.BatchNorm1d(128) if batchnorm else torch.nn.Identity()
    return torch.nn.Sequential(torch.nn.Linear(64, 128), norm, torch.nn.ReLU(),
                               torch.nn.Linear(128, 10))


def buffers(model):
    return [b.clone() for b in model.buffers()]


def step(model, optimizer, batches):
    """One data-parallel step: each rank's batch forward on its own, the gradients averaged,
    BatchNorm's running statistics left as rank 0's forward made them."""
    optimizer.zero_grad()
    rank0 = None
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(model(x), y) / len(batches)
        loss.backward()
        if rank0 is None:
            rank0 = buffers(model)
    for mine, kept in zip(model.buffers(), rank0):
        mine.copy_(kept)
    optimizer.step()


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        right = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return right


def train(config, data, args, seed):
    """Test accuracy after each epoch of one run."""
    x, y, x_test, y_test = data
    model = model_for(seed, not args.no_batchnorm)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ranks = samplers(config, len(y), args, seed)
    out = []
    for epoch in range(args.epochs):
        orders = []
        for sampler in ranks:
            sampler.set_epoch(epoch)
            orders.append(list(sampler))
        # Whole batches only, as many on every rank.
        for start in range(0, len(orders[0]) - args.batch + 1, args.batch):
            rows = [o[start:start + args.batch] for o in orders]
            step(model, optimizer, [(x[r], y[r]) for r in rows])
        out.append(accuracy(model, x_test, y_test))
    return out


def configs(args):
    out = [{"name": "global (DistributedSampler)", "start": "global", "exchange": None}]
    for start, label in (("random", "random start"), ("sorted", "class-sorted start")):
        for exchange in args.exchange:
            out.append({"name": "node-aware, %s, exchange %g" % (label, exchange),
                        "start": start, "exchange": exchange})
    return out


def summarise(runs):
    """Per epoch, (mean, standard deviation) over the runs."""
    return [(statistics.mean(e), statistics.stdev(e) if len(e) > 1 else 0.0)
            for e in zip(*runs)]


def print_table(results, epochs):
    shown = sorted({e for e in (1, 2, 3, 5, 10, 20, 30, 50) if e <= epochs} | {epochs})
    print("| orders | " + " | ".join("epoch %d" % e for e in shown) + " |")
    print("|---|" + "---|" * len(shown))
    for r in results:
        cells = ["%.1f ± %.1f" % (100 * m, 100 * s)
                 for m, s in (r["accuracy"][e - 1] for e in shown)]
        print("| %s | %s |" % (r["name"], " | ".join(cells)))


def plot(results, args, png):
    """Two panels, random and class-sorted start, each with global shuffling beside."""
    with tempfile.NamedTemporaryFile("w", suffix=".gp", delete=False) as gp:
        for i, r in enumerate(results):
            gp.write("$r%d << EOD\n" % i)
            gp.writelines("%d %.4f %.4f\n" % (e + 1, 100 * m, 100 * s)
                          for e, (m, s) in enumerate(r["accuracy"]))
            gp.write("EOD\n")
        gp.write("set terminal pngcairo size 1000,440 font ',10'\nset output '%s'\n" % png)
        gp.write("set multiplot layout 1,2 title 'digits, MLP %s BatchNorm, %d nodes x %d "
                 "ranks, mean of %d seeds'\n" % ("without" if args.no_batchnorm else "with",
                                                 args.nodes, args.ranks_per_node, args.seeds))
        gp.write("set xlabel 'epoch'\nset ylabel 'test accuracy (%%)'\nset grid\n"
                 "set key bottom right\nset yrange [%s:100]\n" % args.plot_floor)
        for start, title in (("random", "node parts drawn at random (the sampler)"),
                             ("sorted", "node parts cut from a class-sorted order")):
            lines = ["$r0 using 1:2 with lines lw 3 lc rgb 'black' title 'global'"]
            lines += ["$r%d using 1:2 with lines lw 2 title 'exchange %g'" % (i, r["exchange"])
                      for i, r in enumerate(results) if r["start"] == start]
            gp.write("set title '%s'\nplot %s\n" % (title, ", ".join(lines)))
        gp.write("unset multiplot\n")
    try:
        subprocess.run(["gnuplot", gp.name], check=True)
    finally:
        os.unlink(gp.name)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--exchange", type=lambda s: [float(f) for f in s.split(",")],
                   default=[0.0, 0.1, 0.5], help="fractions, comma-separated")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--no-batchnorm", action="store_true",
                   help="the MLP without BatchNorm: the ranks share nothing but gradients")
    p.add_argument("--json", help="write every epoch's figures to this file")
    p.add_argument("--plot", help="draw the means into this PNG (gnuplot)")
    p.add_argument("--plot-floor", default="70", help="the plot's lowest accuracy (%%)")
    return p.parse_args()


def main():
    args = parse()
    torch.set_num_threads(1)  # a tiny model: threads only cost here
    # The samplers warn once each that the data is not on an epochfs mount: it is not.
    warnings.filterwarnings("ignore", message=".*not on an epochfs mount")
    args.off_mount = tempfile.gettempdir()
    data = load_digits()
    results = []
    for config in configs(args):
        runs = [train(config, data, args, seed) for seed in range(args.seeds)]
        results.append(dict(config, accuracy=summarise(runs), runs=runs))
        print("done: %s" % config["name"], file=sys.stderr)
    print_table(results, args.epochs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if k != "off_mount"},
                       "results": results}, f, indent=1)
    if args.plot:
        plot(results, args, args.plot)


if __name__ == "__main__":
    main()
