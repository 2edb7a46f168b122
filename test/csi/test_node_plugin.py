"""The CSI node plugin as kubelet drives it: gRPC calls on its unix socket, real epochfs mounts.

Run by ctest (`csi_node_plugin`) with PYTHONPATH=<build>/csi (the package with its compiled
csi_pb2) and EPOCHFS_BINARY; needs root (mounts) and Debian's python3-grpcio."""

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import grpc
import pytest
import yaml

from epochfs_csi import csi_pb2, mounts, service, volumes
from epochfs_csi.__main__ import parser

EPOCHFS = os.environ.get("EPOCHFS_BINARY", "epochfs")
DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "tools" / "deploy"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts need root")
MOUNT = csi_pb2.VolumeCapability(
    mount=csi_pb2.VolumeCapability.MountVolume(),
    access_mode=csi_pb2.VolumeCapability.AccessMode(
        mode=csi_pb2.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY))


class Plugin:
    """epochfs-csi started on a socket in a temporary tree, and a channel to it as kubelet has."""

    def __init__(self, root, *args):
        self.root = root
        self.sources = root / "datasets"
        self.pods = root / "pods"
        self.cache = root / "cache"
        for d in (self.sources / "imagenet" / "n01", self.sources / "other", self.pods):
            d.mkdir(parents=True, exist_ok=True)
        self.sample = os.urandom(300_000)
        (self.sources / "imagenet" / "n01" / "a.jpg").write_bytes(self.sample)
        (self.sources / "imagenet" / "n01" / "a.jpg").chmod(0o644)
        socket = root / "csi.sock"
        self.log = open(root / "plugin.log", "w+", encoding="utf-8")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "epochfs_csi", f"--endpoint=unix://{socket}",
             f"--source-root={self.sources}", f"--cache-root={self.cache}",
             f"--epochfs={EPOCHFS}", "--node-id=node-7", *args],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        grpc.channel_ready_future(self.channel).result(timeout=30)

    def call(self, service_name, method, request):
        stub = self.channel.unary_unary(
            f"/csi.v1.{service_name}/{method}", request_serializer=type(request).SerializeToString,
            response_deserializer=getattr(csi_pb2, method + "Response").FromString)
        return stub(request, timeout=60)

    def refused(self, method, request):
        with pytest.raises(grpc.RpcError) as caught:
            self.call("Node", method, request)
        return caught.value.code(), caught.value.details()

    def target(self, pod):
        # kubelet makes the parent; the plugin makes and removes the target itself.
        parent = self.pods / pod / "volumes" / "kubernetes.io~csi" / "dataset"
        parent.mkdir(parents=True, exist_ok=True)
        return str(parent / "mount")

    def publish(self, pod, context, readonly=False, capability=MOUNT):
        return self.call("Node", "NodePublishVolume", csi_pb2.NodePublishVolumeRequest(
            volume_id=f"csi-{pod}", target_path=self.target(pod), volume_capability=capability,
            readonly=readonly, volume_context=context))

    def unpublish(self, pod):
        return self.call("Node", "NodeUnpublishVolume", csi_pb2.NodeUnpublishVolumeRequest(
            volume_id=f"csi-{pod}", target_path=self.target(pod)))

    def mounts(self):
        return {t: s for t, s in mounts.epochfs_mounts().items() if t.startswith(str(self.root))}

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.channel.close()
        for target in self.mounts():  # whatever a failed test left
            subprocess.run(["umount", "-l", target], check=False)
        self.log.close()


@pytest.fixture
def tree():
    # Not pytest's tmp_path: its parents are private to root, and a pod's user reads through.
    root = pathlib.Path(tempfile.mkdtemp(prefix="epochfs-csi-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def plugin(tree):
    p = Plugin(tree, "--max-volumes=2", "--max-cache-size=64M")
    yield p
    p.stop()


def wait_for(condition, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def daemons_of(target):
    found = subprocess.run(["pgrep", "-f", f"epochfs mount --foreground .*{target}$"],
                           capture_output=True, text=True, check=False)
    return found.stdout.split()


def inline(source="imagenet", **more):
    return {"source": source, "csi.storage.k8s.io/ephemeral": "true",
            "csi.storage.k8s.io/pod.name": "train-0", **more}


def test_identity_and_node_info(plugin):
    info = plugin.call("Identity", "GetPluginInfo", csi_pb2.GetPluginInfoRequest())
    version = subprocess.run([EPOCHFS, "--version"], capture_output=True, text=True).stdout
    assert info.name == service.NAME and version.split()[-1] == info.vendor_version
    assert not plugin.call("Identity", "GetPluginCapabilities",
                           csi_pb2.GetPluginCapabilitiesRequest()).capabilities
    assert plugin.call("Identity", "Probe", csi_pb2.ProbeRequest()).ready.value
    node = plugin.call("Node", "NodeGetInfo", csi_pb2.NodeGetInfoRequest())
    assert (node.node_id, node.max_volumes_per_node) == ("node-7", 2)
    assert not plugin.call("Node", "NodeGetCapabilities",
                           csi_pb2.NodeGetCapabilitiesRequest()).capabilities
    code, _ = plugin.refused("NodeStageVolume", csi_pb2.NodeStageVolumeRequest())
    assert code == grpc.StatusCode.UNIMPLEMENTED


def test_a_pod_volume_is_mounted_read_by_any_user_and_unmounted_with_its_cache(plugin):
    plugin.publish("a", inline(cacheSize="32Mi"))
    target = plugin.target("a")
    assert plugin.mounts() == {target: str(plugin.sources / "imagenet")}
    # A pod's user need not be root: the mount lets others in.
    read = subprocess.run(["runuser", "-u", "nobody", "--", "cat", f"{target}/n01/a.jpg"],
                          capture_output=True, check=True)
    assert read.stdout == plugin.sample
    # kubelet retries: the same publish again succeeds and mounts nothing more.
    plugin.publish("a", inline(cacheSize="32Mi"))
    assert len(plugin.mounts()) == 1
    assert any(plugin.cache.iterdir()), "the volume's cache directory"
    plugin.unpublish("a")
    assert plugin.mounts() == {} and not os.path.exists(target)
    # Unmounted, the daemon deletes the cache and exits on its own; unpublish does not wait.
    assert wait_for(lambda: not any(plugin.cache.iterdir())), "the volume's cache is deleted"
    assert wait_for(lambda: not daemons_of(target)), "its daemon exits"
    plugin.unpublish("a")  # and again: nothing to do, still OK


def test_a_read_only_volume_serves_reads_and_refuses_orders(plugin):
    plugin.publish("ro", inline(), readonly=True)
    target = plugin.target("ro")
    assert pathlib.Path(target, "n01", "a.jpg").read_bytes() == plugin.sample
    with pytest.raises(OSError) as caught:
        pathlib.Path(target, ".epochfs", "order.txt").write_text("n01/a.jpg\n")
    assert caught.value.errno == 30  # EROFS
    plugin.unpublish("ro")


@pytest.mark.parametrize("context, capability, code, words", [
    (inline("../../etc"), MOUNT, grpc.StatusCode.INVALID_ARGUMENT, "outside the source root"),
    (inline("/etc"), MOUNT, grpc.StatusCode.INVALID_ARGUMENT, "outside the source root"),
    (inline("escape"), MOUNT, grpc.StatusCode.INVALID_ARGUMENT, "outside the source root"),
    (inline("missing"), MOUNT, grpc.StatusCode.NOT_FOUND, "no directory"),
    ({"csi.storage.k8s.io/ephemeral": "true"}, MOUNT, grpc.StatusCode.INVALID_ARGUMENT,
     "source is missing"),
    (inline(cachesize="1G"), MOUNT, grpc.StatusCode.INVALID_ARGUMENT,
     "unknown volume attribute cachesize"),
    (inline(cacheSize="lots"), MOUNT, grpc.StatusCode.INVALID_ARGUMENT, "not a size"),
    (inline(cacheSize="1Ti"), MOUNT, grpc.StatusCode.OUT_OF_RANGE, "64 MiB"),
    (inline(), csi_pb2.VolumeCapability(block=csi_pb2.VolumeCapability.BlockVolume()),
     grpc.StatusCode.INVALID_ARGUMENT, "volumeMode Filesystem"),
    (inline(), csi_pb2.VolumeCapability(mount=csi_pb2.VolumeCapability.MountVolume(
        mount_flags=["nosuid"])), grpc.StatusCode.INVALID_ARGUMENT, "mount options"),
    (inline(), csi_pb2.VolumeCapability(mount=csi_pb2.VolumeCapability.MountVolume(
        fs_type="ext4")), grpc.StatusCode.INVALID_ARGUMENT, "fsType"),
])
def test_what_a_pod_author_may_not_ask_for_is_refused_with_a_reason(plugin, context, capability,
                                                                     code, words):
    (plugin.sources / "escape").symlink_to("/etc")
    with pytest.raises(grpc.RpcError) as caught:
        plugin.publish("bad", context, capability=capability)
    assert caught.value.code() == code and words in caught.value.details()
    assert plugin.mounts() == {} and not os.path.exists(plugin.target("bad"))


def test_a_volume_whose_daemon_died_is_mounted_again_by_the_next_publish(plugin):
    plugin.publish("a", inline())
    target = plugin.target("a")
    daemon = daemons_of(target)
    assert len(daemon) == 1
    os.kill(int(daemon[0]), signal.SIGKILL)
    # kill() returns before the daemon is gone; then the pod's reads fail with ENOTCONN.
    assert wait_for(lambda: mounts.is_dead(target))
    plugin.publish("a", inline())  # as kubelet retries after the plugin's pod came back
    assert pathlib.Path(target, "n01", "a.jpg").read_bytes() == plugin.sample
    assert len(plugin.mounts()) == 1
    plugin.unpublish("a")
    assert plugin.mounts() == {}


def test_the_node_mounts_at_most_max_volumes_and_one_source_per_target(plugin):
    plugin.publish("a", inline())
    plugin.publish("b", inline("other"))
    with pytest.raises(grpc.RpcError) as caught:
        plugin.publish("c", inline())
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 2" in caught.value.details()
    with pytest.raises(grpc.RpcError) as caught:  # pod a's target, another source
        plugin.call("Node", "NodePublishVolume", csi_pb2.NodePublishVolumeRequest(
            volume_id="csi-a", target_path=plugin.target("a"), volume_capability=MOUNT,
            volume_context=inline("other")))
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    plugin.unpublish("a")
    plugin.publish("c", inline())
    assert len(plugin.mounts()) == 2
    plugin.unpublish("b")
    plugin.unpublish("c")


def test_a_failed_mount_says_epochfs_own_words_and_frees_its_slot(tree):
    (tree / "cache").write_text("not a directory")
    p = Plugin(tree, "--max-volumes=1")
    try:
        for _ in range(2):  # the slot is free again after the failure
            with pytest.raises(grpc.RpcError) as caught:
                p.publish("a", inline())
            assert caught.value.code() == grpc.StatusCode.INTERNAL
            assert "epochfs mount" in caught.value.details() and "cache" in caught.value.details()
        assert p.mounts() == {} and not os.path.exists(p.target("a"))
    finally:
        p.stop()


def test_stopping_the_plugin_unmounts_every_volume(tree):
    p = Plugin(tree)
    try:
        p.publish("a", inline())
        assert len(p.mounts()) == 1
        p.process.send_signal(signal.SIGTERM)
        assert p.process.wait(timeout=60) == 0
        assert p.mounts() == {} and not any(p.cache.iterdir())
    finally:
        p.stop()


def test_the_deployment_manifests_match_the_plugin():
    driver = list(yaml.safe_load_all((DEPLOY / "csi-driver.yaml").read_text()))
    kinds = {d["kind"]: d for d in driver}
    assert kinds["CSIDriver"]["metadata"]["name"] == service.NAME
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    args = parser().parse_args(containers["plugin"]["args"])
    hostpaths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    plugin_dir = next(m for m in containers["plugin"]["volumeMounts"] if m["name"] == "plugin-dir")
    socket = args.endpoint.removeprefix("unix://")
    assert os.path.dirname(socket) == plugin_dir["mountPath"]
    registrar = " ".join(containers["registrar"]["args"])
    assert (f"--kubelet-registration-path={hostpaths['plugin-dir']}/"
            f"{os.path.basename(socket)}") in registrar
    pods = next(m for m in containers["plugin"]["volumeMounts"] if m["name"] == "pods")
    assert pods["mountPropagation"] == "Bidirectional"
    for example in yaml.safe_load_all((DEPLOY / "csi-volumes.yaml").read_text()):
        for csi in _csi_sources(example):
            assert csi["driver"] == service.NAME
            assert set(csi["volumeAttributes"]) <= set(volumes.KEYS)


def _csi_sources(document):
    if document["kind"] == "PersistentVolume":
        yield document["spec"]["csi"]
    for volume in document.get("spec", {}).get("volumes", []):
        if "csi" in volume:
            yield volume["csi"]


def test_sizes_read_as_kubernetes_and_epochfs_write_them():
    assert volumes.parse_size("300Gi") == volumes.parse_size("300G") == 300 << 30
    assert volumes.parse_size("1.5T") == 3 << 39
    assert volumes.parse_size("4096") == 4096
    assert volumes.parse_size("300 GB") == 300 << 30
    assert volumes.parse_size("-1G") is None and volumes.parse_size("1P") is None
