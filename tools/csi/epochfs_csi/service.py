"""The gRPC side: the CSI Identity service, and the methods of both services bound to their
handlers, each call logged with its outcome. Methods not listed (NodeStageVolume,
NodeGetVolumeStats, the Controller service) answer UNIMPLEMENTED, which kubelet expects of a
driver whose capabilities do not name them."""

import logging
import os
import time

import grpc
from google.protobuf import wrappers_pb2

from epochfs_csi import csi_pb2
from epochfs_csi.volumes import Refused

NAME = "epochfs.csi"
log = logging.getLogger("epochfs-csi")


class Identity:
    def __init__(self, version, epochfs):
        self.version = version
        self.epochfs = epochfs

    def get_plugin_info(self, request, context):
        return csi_pb2.GetPluginInfoResponse(name=NAME, vendor_version=self.version)

    def get_plugin_capabilities(self, request, context):
        # No CONTROLLER_SERVICE: volumes are inline or static PVs, nothing to provision.
        return csi_pb2.GetPluginCapabilitiesResponse()

    def probe(self, request, context):
        if not os.path.exists("/dev/fuse"):
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          "no /dev/fuse in the plugin's container: mount the host's")
        if not os.access(self.epochfs, os.X_OK):
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{self.epochfs} is not an executable")
        return csi_pb2.ProbeResponse(ready=wrappers_pb2.BoolValue(value=True))


def _logged(method, handler):
    def call(request, context):
        start = time.monotonic()
        volume = getattr(request, "volume_id", "")
        try:
            response = handler(request, context)
        except Refused as refused:
            log.warning("%s %s: %s: %s", method, volume, refused.code.name, refused)
            context.abort(refused.code, str(refused))
        except Exception as error:  # pylint: disable=broad-except
            # Said to kubelet (the pod's events) rather than gRPC's "Exception calling application".
            log.exception("%s %s failed", method, volume)
            context.abort(grpc.StatusCode.INTERNAL, f"{method}: {error}")
        log.info("%s %s: OK (%.0f ms)", method, volume, (time.monotonic() - start) * 1e3)
        return response

    return call


def _bind(service, methods):
    handlers = {}
    for method, handler in methods.items():
        request = getattr(csi_pb2, method + "Request")
        response = getattr(csi_pb2, method + "Response")
        handlers[method] = grpc.unary_unary_rpc_method_handler(
            _logged(method, handler), request_deserializer=request.FromString,
            response_serializer=response.SerializeToString)
    return grpc.method_handlers_generic_handler(service, handlers)


def handlers(identity, node):
    """The generic handlers for a grpc.Server: csi.v1.Identity and csi.v1.Node."""
    return [
        _bind("csi.v1.Identity", {
            "GetPluginInfo": identity.get_plugin_info,
            "GetPluginCapabilities": identity.get_plugin_capabilities,
            "Probe": identity.probe,
        }),
        _bind("csi.v1.Node", {
            "NodeGetInfo": node.get_info,
            "NodeGetCapabilities": node.get_capabilities,
            "NodePublishVolume": node.publish,
            "NodeUnpublishVolume": node.unpublish,
        }),
    ]
