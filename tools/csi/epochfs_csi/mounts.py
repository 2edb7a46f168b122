"""The epochfs daemons behind the published volumes: one per volume, a child of the plugin.

Each runs ``epochfs mount --foreground``, so its log reaches the plugin's stderr (``kubectl
logs``) line by line with the volume's name, and SIGTERM to the plugin reaches every daemon, each
of which then unmounts and deletes its cache. A daemon counts as started once its mount is in the
mount table and answers; if it exits first, the last lines it printed are the error kubelet
gets. Unmounted, a daemon goes on deleting its cache (minutes for millions of files) and exits
by itself: its reader thread reaps it, and nobody waits or kills it meanwhile."""

import collections
import errno
import os
import subprocess
import sys
import threading
import time

FSTYPE = "fuse.epochfs"
_POLL_S = 0.02


def _unescape(field):
    # /proc/self/mountinfo writes space, tab, newline and backslash as octal escapes.
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def epochfs_mounts():
    """{mount point: source} of the epochfs mounts this process sees."""
    found = {}
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as table:
        for line in table:
            fields = line.split()
            tail = fields[fields.index("-") + 1:]
            if len(tail) >= 2 and tail[0] == FSTYPE:
                found[_unescape(fields[4])] = _unescape(tail[1])
    return found


def is_dead(target):
    """Whether the mount at target has lost its daemon (the kernel answers ENOTCONN)."""
    try:
        os.statvfs(target)
    except OSError as error:
        return error.errno == errno.ENOTCONN
    return False


class Daemon:
    """One volume's ``epochfs mount --foreground`` process."""

    def __init__(self, argv, name):
        self.name = name
        self._tail = collections.deque(maxlen=20)
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True, errors="replace")
        self._reader = threading.Thread(target=self._forward, daemon=True)
        self._reader.start()

    def _forward(self):
        for line in self.process.stderr:
            self._tail.append(line.rstrip())
            sys.stderr.write(f"[{self.name}] {line}")
            sys.stderr.flush()
        self.process.wait()  # its stderr closed: it is exiting

    def wait_mounted(self, target, timeout_s):
        """True once target is an epochfs mount that answers (not a dead one the daemon has yet
        to detach); False if the daemon exited or timeout_s passed (the daemon is then stopped)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # Answering first, then listed: the other way round, the dead mount could be listed
            # just before the daemon detached it, and the bare directory then answer.
            if not is_dead(target) and target in epochfs_mounts():
                return True
            if self.process.poll() is not None:
                self._reader.join(timeout=1)
                return False
            time.sleep(_POLL_S)
        self.stop(timeout_s)
        return False

    def last_words(self):
        return " / ".join(self._tail) or f"epochfs exited with status {self.process.returncode}"

    def terminate(self):
        """SIGTERM: the daemon unmounts and deletes its cache."""
        if self.process.poll() is None:
            self.process.terminate()

    def stop(self, timeout_s):
        """SIGTERM, then SIGKILL past timeout_s."""
        self.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=1)


def unmount(epochfs, target, timeout_s):
    """Unmount target: by ``epochfs unmount`` (which waits for the daemon), else lazily (a mount
    whose daemon died answers nothing). Returns an error message, or None."""
    result = subprocess.run([epochfs, "unmount", target], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode == 0 or target not in epochfs_mounts():
        return None
    lazy = subprocess.run(["umount", "-l", target], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    if lazy.returncode == 0:
        return None
    return (result.stderr.strip() or lazy.stderr.strip()
            or f"umount {target} exited with status {lazy.returncode}")


def remove_target(target):
    """The target directory NodePublishVolume made, removed (CSI: the plugin's to delete)."""
    try:
        os.rmdir(target)
    except FileNotFoundError:
        pass
