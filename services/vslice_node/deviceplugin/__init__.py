"""Front door 1: the kubelet device-plugin API of the node agent (docs/device-plugin.md).

- ``devices``      one GPU -> ``slots`` virtual device IDs the kubelet counts
- ``board``        the current device list, shared with every ListAndWatch stream
- ``pending``      matching an Allocate call to the pod being started (pure)
- ``preferred``    GetPreferredAllocation's choice (pure)
- ``proofs``       checking the extender's proof on a pod's allocation
- ``podresources`` the kubelet's PodResources API: which devices it already gave to whom
- ``allocator``    Allocate end to end: pods from the API server, claim, delivered record;
  the files it writes come from :mod:`vslice_node.handover`
- ``servicer``     the DevicePlugin gRPC service; ``api/`` its .proto and generated stubs
- ``registration``, ``endpoint``  serving the socket, registering, kubelet restarts
- ``metrics``      Allocate's counter and latency histogram (served by the node agent)
"""
