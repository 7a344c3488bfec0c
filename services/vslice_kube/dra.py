"""The resource.k8s.io/v1 calls of vslice's DRA driver: ResourceSlices and ResourceClaims, as
plain dicts the way the API sent them (the typed client models would drop fields newer than
the client, and the core reads dicts).

Every call has a timeout (a kubelet call must never hang on the API server); failures arrive
as :class:`vslice_core.errors.ClusterError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import cluster_error, translated
from vslice_kube.client import api_client
from vslice_kube.responses import drained

__all__ = ["DraApi"]

REQUEST_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 3.0


def _parsed(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data


class DraApi:
    def __init__(self, client: k8s.ApiClient, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._resource = k8s.ResourceV1Api(client)
        self._core = k8s.CoreV1Api(client)
        self._timeout = (min(CONNECT_TIMEOUT_S, timeout_s), timeout_s)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> DraApi:
        try:
            return cls(api_client(kubeconfig or None))
        except (ConfigException, OSError, ValueError) as exc:
            raise ClusterError(f"cannot load the Kubernetes connection settings: {exc}") from exc

    def _read(self, what: str, call: Any, *args: Any) -> dict[str, Any] | None:
        try:
            response = call(*args, _preload_content=False, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise cluster_error(exc, what) from exc
        except OSError as exc:
            raise cluster_error(exc, what) from exc
        return _parsed(response)

    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim, or None when there is none of that name."""
        return self._read(
            f"read ResourceClaim {namespace}/{name}",
            self._resource.read_namespaced_resource_claim,
            name,
            namespace,
        )

    def resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every claim (of one namespace, or of all)."""
        where = namespace or "all namespaces"
        with translated(f"list ResourceClaims in {where}"):
            if namespace:
                response = self._resource.list_namespaced_resource_claim(
                    namespace, _preload_content=False, _request_timeout=self._timeout
                )
            else:
                response = self._resource.list_resource_claim_for_all_namespaces(
                    _preload_content=False, _request_timeout=self._timeout
                )
        return list(_parsed(response).get("items") or [])

    def resource_slices(self, driver: str) -> list[dict[str, Any]]:
        """Every ResourceSlice of ``driver``."""
        with translated(f"list ResourceSlices of {driver}"):
            response = self._resource.list_resource_slice(
                field_selector=f"spec.driver={driver}",
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        return list(_parsed(response).get("items") or [])

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when there is none of that name."""
        return self._read(
            f"read pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace
        )

    def resource_slice(self, name: str) -> dict[str, Any] | None:
        return self._read(f"read ResourceSlice {name}", self._resource.read_resource_slice, name)

    def node_uid(self, name: str) -> str | None:
        node = self._read(f"read node {name}", self._core.read_node, name)
        uid = ((node or {}).get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    def put_resource_slice(self, body: Mapping[str, Any], resource_version: str | None) -> None:
        """Create the slice (``resource_version`` None) or replace the stored one, which must
        still be at that version (a concurrent writer makes this a 409 ClusterError)."""
        name = str(body["metadata"]["name"])
        created: Any = dict(body)  # the client takes dicts as they are
        if resource_version is None:
            with translated(f"create ResourceSlice {name}"):
                drained(
                    self._resource.create_resource_slice(
                        created, _preload_content=False, _request_timeout=self._timeout
                    )
                )
            return
        replacement: Any = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": resource_version},
        }
        with translated(f"replace ResourceSlice {name}"):
            drained(
                self._resource.replace_resource_slice(
                    name, replacement, _preload_content=False, _request_timeout=self._timeout
                )
            )

    def delete_resource_slice(self, name: str) -> None:
        try:
            drained(
                self._resource.delete_resource_slice(
                    name, _preload_content=False, _request_timeout=self._timeout
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                raise cluster_error(exc, f"delete ResourceSlice {name}") from exc
