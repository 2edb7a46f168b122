#!/bin/bash
# Slurm Prolog for a node with an epochfs mount (slurm.conf: Prolog=/etc/slurm/epochfs-prolog.sh).
# Runs as root on each of a job's nodes before the job starts. It checks that the node's mount
# (epochfs.fstab or mnt-dataset.mount) is up and its daemon answers, remounts it once if not,
# and fails otherwise: Slurm then drains the node and requeues the job.
#
# It exports nothing: the job needs no setting. The Python samplers name the job whose orders
# they publish after SLURM_JOB_ID (and SLURM_STEP_ID), which Slurm sets in every task, so all
# ranks of a step share one job and two jobs never collide, even with the same rank names.
# Set EPOCHFS_JOB in the job script only to group ranks some other way.
set -u
MOUNT=${EPOCHFS_MOUNT:-/mnt/dataset}
export PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

served() {
  # Mounted as epochfs, and answering: statfs on a mount whose daemon died fails (ENOTCONN).
  findmnt -n -t fuse.epochfs --mountpoint "$MOUNT" >/dev/null &&
    timeout -s KILL 30 stat -f "$MOUNT" >/dev/null 2>&1
}

served && exit 0
echo "epochfs prolog: $MOUNT is not served; mounting it again" >&2
timeout -s KILL 60 epochfs doctor "$MOUNT" >&2  # what is wrong, for slurmd's log
umount -l "$MOUNT" 2>/dev/null                  # a dead mount, if any
mount "$MOUNT" >&2                              # or: systemctl restart mnt-dataset.mount
served && exit 0
echo "epochfs prolog: $MOUNT is still not served" >&2
exit 1
