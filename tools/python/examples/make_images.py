#!/usr/bin/python3
"""Writes a small ImageFolder dataset of JPEG images (random noise, in class directories).

    make_images.py DIR [--files N] [--classes C] [--size PIXELS]
"""

import argparse
import os
import random

from PIL import Image


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--size", type=int, default=160, help="image width and height in pixels")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    for i in range(a.files):
        cls = os.path.join(a.dir, "class_%03d" % (i % a.classes))
        os.makedirs(cls, exist_ok=True)
        pixels = rng.randbytes(a.size * a.size * 3)
        Image.frombytes("RGB", (a.size, a.size), pixels).save(
            os.path.join(cls, "img_%06d.jpg" % i), quality=90)


if __name__ == "__main__":
    main()
