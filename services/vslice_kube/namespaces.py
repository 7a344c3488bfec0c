"""Labelling namespaces (a merge patch: other labels stay as they are)."""

from __future__ import annotations

from collections.abc import Mapping

from kubernetes import client as k8s

from vslice_kube.apierrors import translated


def label_namespace(api_client: k8s.ApiClient, name: str, labels: Mapping[str, str]) -> None:
    """Set ``labels`` on the namespace ``name`` (which must exist)."""
    with translated(f"label namespace {name}"):
        k8s.CoreV1Api(api_client).patch_namespace(
            name, {"metadata": {"labels": dict(labels)}}, _preload_content=False
        )
