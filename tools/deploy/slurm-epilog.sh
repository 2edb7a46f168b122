#!/bin/bash
# Slurm Epilog for a node with an epochfs mount (slurm.conf: Epilog=/etc/slurm/epochfs-epilog.sh).
# Runs as root on each of a job's nodes after the job.
#
# Nothing is needed for the job's orders: its streams and manifests end by themselves once its
# processes have exited (or after the mount's --job-idle-timeout), and its cached files stay for
# the next job. What can be left is disk: a mount whose daemon was killed (SIGKILL, the OOM
# killer, a crash) leaves its cache directory behind. `epochfs clean` removes those; it never
# touches a live mount's directory (its lock is held). `--dry-run` only lists them. The same
# line serves as a cron job on nodes without Slurm.
#
# It never fails: a failing Epilog drains the node.
set -u
CACHE_DIR=${EPOCHFS_CACHE_DIR:-/nvme/epochfs}   # the mount's cache_dir
export PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

if command -v logger >/dev/null; then
  epochfs clean --cache-dir "$CACHE_DIR" 2>&1 | logger -t epochfs-epilog
else
  epochfs clean --cache-dir "$CACHE_DIR" >&2
fi
exit 0
