"""The Kubernetes and kwok versions the lab uses, pinned in this one place.

The default is the latest Kubernetes v1.36 patch the Go module proxy serves: 1.36 is the first
minor with DRA consumable capacity on by default, which the DRA path needs (see
docs/kubernetes-versions.md). v1.34 stays supported (``--k8s-version v1.34.4``; CI builds it and
runs a smoke test on it). From 1.35 the kubelet refuses to start on a cgroup v1 host unless its
configuration sets ``failCgroupV1: false``, which a real node's kubelet configuration does
(``nodeconfig.kubelet_config``); the lab's hosts are cgroup v1. kwok v0.8.0 is built against
the 1.36 client libraries and drives 1.34 nodes and pods as well (only stable core APIs).

etcd is built from source too: Kubernetes 1.34 and 1.36 are released with etcd 3.6, and an etcd
older than 3.4.31 (Debian 12 ships 3.4.23) lacks the watch progress requests the API server's
watch cache relies on, which shows as "Too large resource version" timeouts and slow lists.

A real node runs the kubelet of the same Kubernetes version (built with cgo) and containerd 2
from its own Go module; runc and the CNI plugins come from the distribution's packages.
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.36.3"
OLDEST_KUBERNETES_VERSION = "v1.34.4"
"""The oldest version vslice supports: CI builds it beside the default and an end-to-end smoke
test (``tests/e2e/test_lab_simulated_oldest.py``) runs a lab on it."""
KWOK_VERSION = "v0.8.0"
ETCD_VERSION = "v3.6.16"
CONTAINERD_VERSION = "v2.4.2"
"""containerd 2 for real nodes: CDI on by default, config version 4 (see ``realnode``)."""
