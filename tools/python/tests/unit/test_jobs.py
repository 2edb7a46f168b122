"""epochfs.job_id and the header lines publish and set_manifest write (#job, #manifest), on a
fake mount: no daemon, no torch."""

import os

import pytest

import epochfs


@pytest.mark.parametrize("env, job", [
    ({"EPOCHFS_JOB": "mine", "TORCHELASTIC_RUN_ID": "run", "SLURM_JOB_ID": "7"}, "mine"),
    ({"EPOCHFS_JOB": "", "TORCHELASTIC_RUN_ID": "run", "SLURM_JOB_ID": "7"}, "run"),
    ({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "2"}, "7.2"),
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": ""}, "7"),
    ({"SLURM_STEP_ID": "2"}, "pid%d" % os.getpid()),
    ({}, "pid%d" % os.getpid()),
])
def test_job_id_resolution_order(clean_env, env, job):
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert epochfs.job_id() == job


def test_job_id_is_sanitized_and_cut_to_64_bytes(clean_env):
    clean_env.setenv("EPOCHFS_JOB", "exp 3/é:x")
    assert epochfs.job_id() == "exp_3___x"
    clean_env.setenv("EPOCHFS_JOB", "a" * 100)
    assert epochfs.job_id() == "a" * 64
    clean_env.setenv("EPOCHFS_JOB", "é" * 100)  # 200 bytes of UTF-8
    assert epochfs.job_id() == "_" * 64


def test_job_id_is_the_calling_process(clean_env):
    pid = os.fork()
    if pid == 0:
        os._exit(0 if epochfs.job_id() == "pid%d" % os.getpid() else 1)
    assert os.waitpid(pid, 0)[1] == 0
    assert epochfs.job_id() == "pid%d" % os.getpid()


def test_an_order_carries_job_and_count_headers(clean_env, fake_mount):
    epochfs.publish(fake_mount.path, ["train/a.jpg", "train/b.jpg"])
    assert fake_mount.orders() == [
        (["#form paths", "#job pid%d" % os.getpid(), "#count 2"], ["train/a.jpg", "train/b.jpg"])]


def test_an_order_with_every_header(clean_env, fake_mount):
    clean_env.setenv("SLURM_JOB_ID", "77")
    epochfs.publish(fake_mount.path, iter([4, 2, 0]), epoch=3, stream="val.rank0",
                    manifest="val")
    epochfs.publish(fake_mount.path, [1], job="other-job")
    assert fake_mount.orders() == [
        (["#form indices", "#epoch 3", "#stream val.rank0", "#job 77", "#manifest val",
          "#count 3"], ["4", "2", "0"]),
        (["#form indices", "#job other-job", "#count 1"], ["1"]),
    ]


def test_a_manifest_carries_job_name_and_count_headers(clean_env, fake_mount):
    clean_env.setenv("EPOCHFS_JOB", "j1")
    epochfs.set_manifest(fake_mount.path, ["train/a.jpg", os.path.join(fake_mount.path, "b")],
                         name="train")
    epochfs.set_manifest(fake_mount.path, ["c"], job="j2")
    assert fake_mount.manifests == [
        (["#job j1", "#manifest train", "#count 2"], ["train/a.jpg", "b"]),
        (["#job j2", "#count 1"], ["c"]),
    ]


@pytest.mark.parametrize("names", [
    {"job": "a b"}, {"job": ""}, {"job": "j" * 65}, {"stream": "x\n#epoch 9"},
    {"manifest": "train/val"}, {"manifest": "é"},
])
def test_a_bad_name_raises_before_anything_is_written(clean_env, fake_mount, names):
    with pytest.raises(ValueError, match="name is 1 to 64"):
        epochfs.publish(fake_mount.path, ["a"], **names)
    if "stream" not in names:
        with pytest.raises(ValueError, match="name is 1 to 64"):
            epochfs.set_manifest(fake_mount.path, ["a"], job=names.get("job"),
                                 name=names.get("manifest"))
    assert os.listdir(fake_mount.control) == ["stats"]


def test_publish_and_set_manifest_still_raise(clean_env, fake_mount, workdir):
    os.mkdir(os.path.join(fake_mount.control, "manifest"))
    with pytest.raises(IsADirectoryError):
        epochfs.set_manifest(fake_mount.path, ["a"])
    with pytest.raises(FileNotFoundError, match="not an epochfs mount"):
        epochfs.publish(workdir, ["a"])
