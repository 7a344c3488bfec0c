"""The Kubernetes and kwok versions the lab uses, pinned in this one place.

Kubernetes v1.34 is the newest minor whose kubelet still runs on cgroup v1 hosts without extra
configuration, and the Go module proxy serves every patch release of it; the lab uses the latest
patch. kwok v0.8.0 builds against the same Kubernetes minor.

etcd is built from source too: Kubernetes 1.34 is released with etcd 3.6, and an etcd older
than 3.4.31 (Debian 12 ships 3.4.23) lacks the watch progress requests the API server's watch
cache relies on, which shows as "Too large resource version" timeouts and slow lists.

A real node runs the kubelet of the same Kubernetes version (built with cgo) and containerd 2
from its own Go module; runc and the CNI plugins come from the distribution's packages.
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.34.4"
KWOK_VERSION = "v0.8.0"
ETCD_VERSION = "v3.6.16"
CONTAINERD_VERSION = "v2.4.2"
"""containerd 2 for real nodes: CDI on by default, config version 4 (see ``realnode``)."""
