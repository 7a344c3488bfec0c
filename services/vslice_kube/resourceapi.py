"""The resource.k8s.io/v1 API handle the services watch DRA objects through, built by the
lookup order of :mod:`vslice_kube.client`.

Like :mod:`vslice_kube.coreapi`: services never import the ``kubernetes`` package; they pass
this object's bound list methods (``api.list_resource_claim_for_all_namespaces``) to
:class:`vslice_kube.watch.ListWatch`.
"""

from __future__ import annotations

from kubernetes import client as k8s

from vslice_kube.client import api_client

__all__ = ["resource_api"]


def resource_api(kubeconfig: str | None = None) -> k8s.ResourceV1Api:
    """A ResourceV1Api on its own connection pool (its watches hold a connection each)."""
    return k8s.ResourceV1Api(api_client(kubeconfig or None))
