"""The resource.k8s.io/v1 API handle the services watch DRA objects through, built by the
lookup order of :mod:`vslice_kube.client`.

Like :mod:`vslice_kube.coreapi`: services never import the ``kubernetes`` package; they pass
this object's bound list methods (``api.list_resource_claim_for_all_namespaces``) to
:class:`vslice_kube.watch.ListWatch`.
"""

from __future__ import annotations

from functools import partial

from kubernetes import client as k8s
from vslice_core.dra import DRIVER

from vslice_kube.client import api_client
from vslice_kube.watch import ListWatch, WatchHandler

__all__ = ["claim_watches", "resource_api"]


def resource_api(kubeconfig: str | None = None) -> k8s.ResourceV1Api:
    """A ResourceV1Api on its own connection pool (its watches hold a connection each)."""
    return k8s.ResourceV1Api(api_client(kubeconfig or None))


def claim_watches(
    kubeconfig: str | None,
    claims: WatchHandler,
    cards: WatchHandler,
    *,
    resync_seconds: float = 300.0,
) -> list[ListWatch]:
    """List+watches (not started) of every ResourceClaim and of vslice's ResourceSlices: what
    the quota on both paths counts allocated claims from (``vslice_control.quota.claims``)."""
    api = resource_api(kubeconfig)
    slices = partial(api.list_resource_slice, field_selector=f"spec.driver={DRIVER}")
    return [
        ListWatch(
            "resourceclaims",
            api.list_resource_claim_for_all_namespaces,
            claims,
            resync_seconds=resync_seconds,
        ),
        ListWatch("resourceslices", slices, cards, resync_seconds=resync_seconds),
    ]
