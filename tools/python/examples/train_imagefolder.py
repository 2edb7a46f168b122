#!/usr/bin/python3
"""Trains a tiny CNN on an ImageFolder dataset on the CPU, the GPU emulated by --compute-ms of
sleep per batch, and prints samples/s per epoch and the epochfs mount's hit rate.

    train_imagefolder.py --data MOUNT/train [--epochs 3] [--workers 4] [--batch-size 64]
                         [--compute-ms 20] [--no-epochfs]

With epochfs (the default), the sampler is wrapped in epochfs.torch.PublishingSampler: two
lines, marked below. --no-epochfs runs the same script without them. Run with Debian's
/usr/bin/python3 (python3-torch, python3-torchvision); from the source tree, set
PYTHONPATH=tools/python.
"""

import argparse
import time

import torch
import torchvision
from torch.utils.data import DataLoader, RandomSampler

import epochfs
import epochfs.torch


def hit_counts(data_dir):
    if not epochfs.is_epochfs(data_dir):
        return None
    s = epochfs.stats(data_dir)
    return s["hits"], s["misses"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="ImageFolder root (on an epochfs mount)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--compute-ms", type=float, default=20, help="emulated GPU time per batch")
    p.add_argument("--no-epochfs", action="store_true", help="do not publish the order")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    transform = torchvision.transforms.Compose([
        torchvision.transforms.Resize((64, 64)),
        torchvision.transforms.ToTensor(),
    ])
    dataset = torchvision.datasets.ImageFolder(a.data, transform=transform)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(a.seed))
    if not a.no_epochfs:
        # epochfs: publish each epoch's order as the sampler draws it.
        sampler = epochfs.torch.PublishingSampler(sampler, a.data,
                                                  epochfs.torch.dataset_paths(dataset))
    loader = DataLoader(dataset, sampler=sampler, batch_size=a.batch_size,
                        num_workers=a.workers, persistent_workers=a.workers > 0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(8, len(dataset.classes)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    print("%d samples in %d classes, %s" % (len(dataset), len(dataset.classes),
          "order published to epochfs" if not a.no_epochfs else "no order published"))
    for epoch in range(a.epochs):
        before = hit_counts(a.data)
        start = time.monotonic()
        samples = 0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            time.sleep(a.compute_ms / 1000)
            samples += len(labels)
        seconds = time.monotonic() - start
        line = "epoch %d: %.0f samples/s" % (epoch + 1, samples / seconds)
        after = hit_counts(a.data)
        if before and after:
            hits, misses = after[0] - before[0], after[1] - before[1]
            line += ", hit rate %.3f" % (hits / max(1, hits + misses))
        print(line, flush=True)


if __name__ == "__main__":
    main()
