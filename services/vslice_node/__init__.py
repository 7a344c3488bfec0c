"""The node part of vslice: what runs on every GPU node.

- ``agent``       the node agent (``vslice serve device-plugin``): settings, and the wiring of
  GPU discovery, the handover and the two front doors into one process
- ``gpus``        where the node's GPUs come from (NVML or an inventory file) and the node's
  inventory annotation; a MIG manager would live here
- ``handover``    what a container is given, on either path: the limits file, its region
  directory, the shim and driver files, the node's CDI spec, the DRA checkpoint
- ``deviceplugin`` front door 1: the kubelet device-plugin API (Allocate and friends)
- ``dra``         front door 2: the kubelet DRA plugin API (NodePrepareResources) and the
  ResourceSlice publisher
- ``monitor``     ``vslice serve monitor``: per-container use read from the shim's regions
- ``nodeapi``     the node's narrow view of the API server (its pods, its node object)
- ``metrics``     what the node's Prometheus endpoints share: the ``node`` label, buckets

The front doors never import each other; both build on ``handover`` and ``gpus``.
"""
