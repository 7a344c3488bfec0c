"""``vslice serve device-plugin``: the kubelet device plugin of one node (docs/device-plugin.md).

- ``devices``      one GPU -> ``slots`` virtual device IDs the kubelet counts
- ``backends``     where GPUs come from: NVML, or an inventory YAML (static)
- ``board``        the current device list, shared with every ListAndWatch stream
- ``pending``      matching an Allocate call to the pod being started (pure)
- ``preferred``    GetPreferredAllocation's choice (pure)
- ``delivery``     env, mounts and device nodes a container receives (pure)
- ``allocator``    Allocate end to end: pods from the API server, claim, delivered record
- ``servicer``     the DevicePlugin gRPC service; ``api/`` its .proto and generated stubs
- ``registration``, ``endpoint``  serving the socket, registering, kubelet restarts
- ``plugin``       everything assembled; ``main`` the ``serve()`` entry point
"""
