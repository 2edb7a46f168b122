"""Helpers the lab's benchmark scripts share (standard library only)."""

import json
import os
import subprocess
import time


def wait_for(what, timeout=60, period=0.05):
    """Polls what() every period seconds until it is true (True) or timeout passes (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(period)
    return False


def stats(mnt):
    """The epochfs mount's stats document, parsed."""
    with open(os.path.join(mnt, ".epochfs", "stats")) as f:
        return json.load(f)


class Daemon:
    """A FUSE daemon in the foreground, mounted at mnt until stop()."""

    def __init__(self, argv, mnt):
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        if not wait_for(lambda: os.path.ismount(mnt) or self.proc.poll() is not None, 30):
            self.stop()
            raise SystemExit("%s did not mount at %s" % (argv[0], mnt))
        if self.proc.poll() is not None:
            raise SystemExit("%s exited with %d" % (argv[0], self.proc.returncode))

    def stop(self):
        subprocess.run(["umount", self.mnt], stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        # A mount whose daemon is gone answers ENOTCONN, which os.path.ismount takes for none.
        with open("/proc/self/mounts") as f:
            mounted = any(line.split()[1] == self.mnt for line in f)
        if mounted:
            subprocess.run(["umount", "-l", self.mnt], stderr=subprocess.DEVNULL)
