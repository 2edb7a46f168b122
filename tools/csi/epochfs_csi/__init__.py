"""epochfs's Kubernetes CSI node plugin: a volume per pod, each an epochfs mount of a dataset
under the node's source root with a cache of its own (docs/user-guide.md, "Kubernetes").

``csi_pb2`` is made by the build from ``tools/csi/csi.proto`` (protoc --python_out)."""
