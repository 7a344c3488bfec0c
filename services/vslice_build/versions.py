"""The Kubernetes and kwok versions the lab uses, pinned in this one place.

The default is the latest Kubernetes v1.37 patch the Go module proxy serves: 1.37 makes DRA
extended resources (KEP-5004, a DeviceClass' ``extendedResourceName``) GA, which gives whole
GPUs by ``nvidia.com/gpu`` on DRA nodes, and device taints (KEP-5055) GA; the DRA path itself
needs 1.36 or later (consumable capacity on by default, see docs/kubernetes-versions.md).
Two older minors stay supported and get a smoke test each (``--k8s-version``; CI builds them
without the real node's binaries): the previous minor, 1.36, the oldest the DRA path runs on,
and the oldest, 1.35, the extender path only. From 1.35 the kubelet refuses to start on a
cgroup v1 host unless its configuration sets ``failCgroupV1: false``, which a real node's
kubelet configuration does (``nodeconfig.kubelet_config``); the lab's hosts are cgroup v1.
kwok v0.8.0 is built against the 1.36 client libraries and drives 1.35 and 1.37 nodes and
pods as well (only stable core APIs).

etcd is built from source too: Kubernetes 1.35 to 1.37 are released with etcd 3.6, and an etcd
older than 3.4.31 (Debian 12 ships 3.4.23) lacks the watch progress requests the API server's
watch cache relies on, which shows as "Too large resource version" timeouts and slow lists.

A real node runs the kubelet of the same Kubernetes version (built with cgo) and containerd 2
from its own Go module; runc and the CNI plugins come from the distribution's packages.
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.37.2"
PREVIOUS_KUBERNETES_VERSION = "v1.36.3"
"""The previous minor: the oldest the DRA path runs on (consumable capacity on by default)."""
OLDEST_KUBERNETES_VERSION = "v1.35.4"
"""The oldest version vslice supports (the extender path only)."""
SMOKE_KUBERNETES_VERSIONS = (PREVIOUS_KUBERNETES_VERSION, OLDEST_KUBERNETES_VERSION)
"""The older versions CI builds beside the default and runs an end-to-end smoke test on
(``tests/e2e/test_lab_simulated_older.py``: a simulated lab on each)."""
KWOK_VERSION = "v0.8.0"
ETCD_VERSION = "v3.6.16"
CONTAINERD_VERSION = "v2.4.2"
"""containerd 2 for real nodes: CDI on by default, config version 4 (see ``realnode``)."""
KUEUE_VERSION = "v0.17.0"
"""Kueue (sigs.k8s.io/kueue), the newest the Go proxy serves: its configuration and queue API
(v1beta2) are what ``vslice kueue config`` writes (docs/kueue.md); tests check the generated
configuration with this version's own loader and workload code (tests/services/kueue_check)."""
