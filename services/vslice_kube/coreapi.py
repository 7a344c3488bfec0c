"""The core/v1 API handle the services use, built by the lookup order of :mod:`vslice_kube.client`.

Services never import the ``kubernetes`` package; they get this object and pass its bound
list methods (``api.list_node``) to :class:`vslice_kube.watch.ListWatch`.
"""

from __future__ import annotations

from kubernetes import client as k8s

from vslice_kube.client import api_client

__all__ = ["core_api"]


def core_api(kubeconfig: str | None = None, *, pool_size: int = 32) -> k8s.CoreV1Api:
    """A CoreV1Api whose connection pool allows ``pool_size`` concurrent requests."""
    return k8s.CoreV1Api(api_client(kubeconfig or None, pool_size=pool_size))
