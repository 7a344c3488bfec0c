"""The Kubernetes and kwok versions the lab uses, pinned in this one place.

Kubernetes v1.34 is the newest minor whose kubelet still runs on cgroup v1 hosts without extra
configuration, and the Go module proxy serves every patch release of it; the lab uses the latest
patch. kwok v0.8.0 builds against the same Kubernetes minor.
"""

from __future__ import annotations

KUBERNETES_VERSION = "v1.34.4"
KWOK_VERSION = "v0.8.0"
ETCD_SOURCE_VERSION = "v3.5.21"
