"""``python -m epochfs``: publish an order and read the stats where the ``epochfs`` binary is not
on PATH (a container or a venv on a node that mounts epochfs)."""

import argparse
import json
import sys

import epochfs


def _publish(a):
    with open(a.file, encoding="utf-8", errors="surrogateescape") as f:
        order = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#")]
    try:
        published = epochfs.publish(a.mountpoint, order, epoch=a.epoch, stream=a.stream)
    except OSError as e:
        print("epochfs: %s: %s" % (a.file, e), file=sys.stderr)
        return 1
    if published is not None:
        print(published.message)
        if published.mostly_missing and a.strict:
            return 1
    return 0


def _stats(a):
    try:
        doc = epochfs.stats(a.mountpoint)
    except OSError as e:
        print("epochfs: %s: %s" % (a.mountpoint, e), file=sys.stderr)
        return 1
    if a.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
        return 0
    for key, value in _flat(doc):
        print("%s: %s" % (key, value))
    return 0


def _flat(doc, prefix=""):
    for key, value in doc.items():
        if isinstance(value, dict):
            yield from _flat(value, prefix + key + ".")
        else:
            yield prefix + key, value


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m epochfs", description=__doc__.split("\n")[0])
    ap.add_argument("--version", action="version", version="epochfs " + epochfs.__version__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("publish", help="publish a shuffle file (one path per line) to a mount")
    p.add_argument("mountpoint")
    p.add_argument("file")
    p.add_argument("--epoch", type=int)
    p.add_argument("--stream")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when most entries looked up name no file you can read")
    p.set_defaults(run=_publish)
    s = sub.add_parser("stats", help="the mount's statistics (docs/stats.md)")
    s.add_argument("mountpoint")
    s.add_argument("--json", action="store_true", help="the whole document as JSON")
    s.set_defaults(run=_stats)
    a = ap.parse_args(argv)
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
