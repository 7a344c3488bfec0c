"""``vslice serve monitor``: per-node Prometheus exporter.

It reads the shim's shared region of every container on the node (found under the node
agent's cache root, see docs/device-plugin.md) and exports, per pod, container and GPU, the
memory used against the limit and the compute limiter's counters; on NVML nodes also the
whole GPU's memory and utilization. See docs/monitor.md.

- ``regions``    finding and reading the containers' regions; ``collector`` their metrics
- ``nodegpus``   whole-GPU metrics from NVML
- ``podnames``   pod uid -> namespace and name, and which pods ended, from the API server
  and the DRA checkpoint
- ``settings``, ``main``  ``vslice serve monitor``
"""
