"""The webhook's ResourceClaimTemplate calls (``resource.k8s.io/v1``): create one, read one.

On the DRA path the webhook creates the template a GPU pod references before it admits the
pod (``vslice_control.webhook.draconvert``). Bodies and answers are plain dicts (the typed
client models would drop fields newer than the client). Every call has a timeout shorter
than the webhook's own (10 s), so a slow API server fails the one admission with a message
instead of the API server timing out the call. Failures arrive as
:class:`vslice_core.errors.ClusterError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import cluster_error
from vslice_kube.client import api_client
from vslice_kube.responses import drained

__all__ = ["ClaimTemplates"]

REQUEST_TIMEOUT_S = 4.0
CONNECT_TIMEOUT_S = 2.0


class ClaimTemplates:
    def __init__(self, client: k8s.ApiClient, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._api = k8s.ResourceV1Api(client)
        self._timeout = (min(CONNECT_TIMEOUT_S, timeout_s), timeout_s)

    @classmethod
    def connect(cls, kubeconfig: str | None = None) -> ClaimTemplates:
        try:
            return cls(api_client(kubeconfig or None))
        except (ConfigException, OSError, ValueError) as exc:
            raise ClusterError(f"cannot load the Kubernetes connection settings: {exc}") from exc

    def create(self, template: Mapping[str, Any]) -> bool:
        """Create the template; False when one of that name already exists (409)."""
        metadata = template["metadata"]
        namespace, name = str(metadata["namespace"]), str(metadata["name"])
        body: Any = dict(template)  # the client takes dicts as they are
        try:
            drained(
                self._api.create_namespaced_resource_claim_template(
                    namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise cluster_error(exc, f"create ResourceClaimTemplate {namespace}/{name}") from exc
        except (HTTPError, OSError) as exc:
            raise cluster_error(exc, f"create ResourceClaimTemplate {namespace}/{name}") from exc
        return True

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored template, or None when there is none of that name."""
        what = f"read ResourceClaimTemplate {namespace}/{name}"
        try:
            # With _preload_content=False the answer is the unread response, not the model.
            response: Any = self._api.read_namespaced_resource_claim_template(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise cluster_error(exc, what) from exc
        except (HTTPError, OSError) as exc:
            raise cluster_error(exc, what) from exc
        data: dict[str, Any] = json.loads(response.data)
        return data
