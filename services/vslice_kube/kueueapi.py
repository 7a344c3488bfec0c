"""The SDK's reads of Kueue's objects (kueue.x-k8s.io/v1beta2): LocalQueues and Workloads.

Kueue is optional. A cluster without it answers 404 for its resources and a user without
read access 403; both give empty lists and :attr:`KueueApi.unavailable` says why, so the views
show no queues instead of failing, and ``client.run(queue=...)`` can say what is missing.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import translated

__all__ = ["GROUP", "VERSION", "KueueApi"]

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
ABSENT = {
    404: "Kueue is not installed in this cluster (kueue.x-k8s.io/v1beta2 is not served)",
    403: "you may not read Kueue's objects here",
}


class KueueApi:
    """Lists of LocalQueues and Workloads as plain dicts."""

    def __init__(self, api: k8s.ApiClient, *, timeout_s: float) -> None:
        self._custom: Any = k8s.CustomObjectsApi(api)
        self._timeout = timeout_s
        self.unavailable: str | None = None
        """Why the last list came back empty without asking (None: it was read)."""
        self.forbidden = False
        """The last list was refused (403): Kueue is there, the user may not read it."""

    def local_queues(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """The LocalQueues of one namespace (or of all); [] without Kueue."""
        return self._list("localqueues", namespace)

    def workloads(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Kueue's Workloads of one namespace (or of all); [] without Kueue."""
        return self._list("workloads", namespace)

    def _list(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        options = {"_preload_content": False, "_request_timeout": self._timeout}
        where = f"in {namespace}" if namespace else "in all namespaces"
        try:
            with translated(f"list Kueue {plural} {where}"):
                if namespace is None:
                    response = self._custom.list_cluster_custom_object(
                        GROUP, VERSION, plural, **options
                    )
                else:
                    response = self._custom.list_namespaced_custom_object(
                        GROUP, VERSION, namespace, plural, **options
                    )
                body = json.loads(response.data)
        except ClusterError as exc:
            if exc.code not in ABSENT:
                raise
            self.unavailable = f"list Kueue {plural} {where}: {exc.code}: {ABSENT[exc.code]}"
            self.forbidden = exc.code == 403
            return []
        self.unavailable, self.forbidden = None, False
        return list(body.get("items") or [])
