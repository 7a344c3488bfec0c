"""The Kubernetes calls the SDK makes: workloads (Pods, Jobs), their logs, nodes and pods, and
the DRA path's ResourceSlices, ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1).

:class:`Workloads` takes an ``ApiClient`` and returns plain dicts as the API sent them
(camelCase keys, annotations as strings), so the SDK never sees the client's model classes.
Every call has a request timeout; failures arrive as :class:`vslice_core.errors.ClusterError`
with the server's parsed Status kept (``.status``, ``.code``), raised ``from`` the client's
exception.

The DRA lists are optional for the views: a cluster that does not serve resource.k8s.io/v1
(404: Kubernetes before 1.34) or a user not allowed to list it (403) gets empty lists, and
:attr:`Workloads.dra_unavailable` says why, so the views show the extender path and name the
cause once instead of failing.

The SDK looks up the connection in the order kubectl uses (a kubeconfig wins over the
in-cluster service account, see :func:`sdk_kubeconfig`); the services keep the order of
:mod:`vslice_kube.client`, where the in-cluster account wins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from vslice_core.errors import ClusterError

from vslice_kube.apierrors import translated
from vslice_kube.client import api_client, kubeconfig_from_environment
from vslice_kube.dra import DraApi
from vslice_kube.kueueapi import KueueApi
from vslice_kube.responses import drained

__all__ = ["IN_CLUSTER_NAMESPACE", "Workloads", "sdk_kubeconfig"]

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
REQUEST_TIMEOUT_S = 30.0
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# The codes that mean "no DRA here for you", not "the cluster is broken".
DRA_ABSENT = {404: "is not served (Kubernetes 1.34 or newer serves it)", 403: "is not allowed"}


def sdk_kubeconfig(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The kubeconfig the SDK uses, or None for the in-cluster service account.

    Order: ``explicit``; the first existing file of ``$KUBECONFIG``; ``~/.kube/config``;
    otherwise the in-cluster account (:func:`vslice_kube.client.kubeconfig_path` raises a
    ClusterError naming everything tried when that is missing too).
    """
    if explicit:
        return Path(explicit).expanduser()
    return kubeconfig_from_environment()


def default_namespace(kubeconfig: Path | None) -> str:
    """The namespace of the kubeconfig's current context (or the pod's own), else default."""
    if kubeconfig is None:
        if IN_CLUSTER_NAMESPACE.is_file():
            return IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
        return "default"
    contexts: Any = k8s_config.list_kube_config_contexts  # untyped in the client package
    try:
        _, active = contexts(config_file=str(kubeconfig))
    except (k8s_config.ConfigException, yaml.YAMLError, OSError, ValueError) as exc:
        raise ClusterError(f"kubeconfig {str(kubeconfig)!r} cannot be read: {exc}") from exc
    namespace = (active or {}).get("context", {}).get("namespace")
    return str(namespace) if namespace else "default"


def _body(response: Any) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(response.data)
    return parsed


class Workloads:
    """Typed-enough calls on Pods, Jobs, Nodes and logs for one cluster."""

    def __init__(self, api: k8s.ApiClient, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        # Typed as Any: we send and read raw JSON (``_preload_content=False``), which the
        # client's annotations (model classes in, model classes out) do not describe.
        self.api_client: Any = api
        self._core: Any = k8s.CoreV1Api(api)
        self._batch: Any = k8s.BatchV1Api(api)
        self._resource: Any = k8s.ResourceV1Api(api)
        self._scheduling: Any = k8s.SchedulingV1Api(api)
        self._dra = DraApi(api, timeout_s=timeout_s)  # the node plugin's calls, reused
        self.kueue = KueueApi(api, timeout_s=timeout_s)
        self._timeout = timeout_s
        self.dra_unavailable: str | None = None
        """Why the last DRA list came back empty without asking (None: it was read)."""

    @classmethod
    def connect(cls, kubeconfig: str | os.PathLike[str] | None = None) -> tuple[Workloads, str]:
        """Connect in the SDK's lookup order; returns the calls and the default namespace."""
        path = sdk_kubeconfig(kubeconfig)
        if path is not None and not path.is_file():
            raise ClusterError(f"kubeconfig {str(path)!r} does not exist or is not a file")
        namespace = default_namespace(path)  # also reports an unreadable kubeconfig clearly
        try:
            client = api_client(path)
        except k8s_config.ConfigException as exc:
            raise ClusterError(f"kubeconfig {str(path)!r} is not usable: {exc}") from exc
        return cls(client), namespace

    def close(self) -> None:
        self.api_client.close()

    # --- reading ---------------------------------------------------------------------

    def list_nodes(self) -> list[dict[str, Any]]:
        with translated("list nodes"):
            body = _body(
                self._core.list_node(_preload_content=False, _request_timeout=self._timeout)
            )
        return list(body.get("items") or [])

    def get_node(self, name: str) -> dict[str, Any]:
        with translated(f"get node {name}"):
            return _body(
                self._core.read_node(name, _preload_content=False, _request_timeout=self._timeout)
            )

    def list_pods(
        self, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Pods of one namespace, or of all namespaces when ``namespace`` is None."""
        options: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if label_selector:
            options["label_selector"] = label_selector
        where = f"in {namespace}" if namespace else "in all namespaces"
        with translated(f"list pods {where}"):
            if namespace is None:
                response = self._core.list_pod_for_all_namespaces(**options)
            else:
                response = self._core.list_namespaced_pod(namespace, **options)
        return list(_body(response).get("items") or [])

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        with translated(f"get pod {namespace}/{name}"):
            return _body(
                self._core.read_namespaced_pod(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                )
            )

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        with translated(f"get job {namespace}/{name}"):
            return _body(
                self._batch.read_namespaced_job(
                    name, namespace, _preload_content=False, _request_timeout=self._timeout
                )
            )

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The pods a Job created, oldest first."""
        pods = self.list_pods(namespace, label_selector=f"{JOB_NAME_LABEL}={job}")
        return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")

    def list_priority_classes(self) -> list[dict[str, Any]]:
        """Every PriorityClass (cluster-scoped)."""
        with translated("list priority classes"):
            body = _body(
                self._scheduling.list_priority_class(
                    _preload_content=False, _request_timeout=self._timeout
                )
            )
        return list(body.get("items") or [])

    def events_with_reason(self, namespace: str, reason: str) -> list[dict[str, Any]]:
        """Events of one reason in a namespace, whatever they are about (the objects may be
        gone: an evicted pod's events outlive it)."""
        with translated(f"list {reason} events in {namespace}"):
            body = _body(
                self._core.list_namespaced_event(
                    namespace,
                    field_selector=f"reason={reason}",
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            )
        return list(body.get("items") or [])

    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Events about one pod (scheduling failures explain themselves here)."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={name}"
        with translated(f"list events of pod {namespace}/{name}"):
            body = _body(
                self._core.list_namespaced_event(
                    namespace,
                    field_selector=selector,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            )
        return list(body.get("items") or [])

    def logs(
        self,
        namespace: str,
        name: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
    ) -> str:
        options: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if container:
            options["container"] = container
        if tail_lines is not None:
            options["tail_lines"] = tail_lines
        with translated(f"read logs of pod {namespace}/{name}"):
            response = self._core.read_namespaced_pod_log(name, namespace, **options)
        data: bytes = response.data
        return data.decode("utf-8", errors="replace")

    # --- the DRA path (resource.k8s.io/v1) ----------------------------------------------

    def _optional_list(self, what: str, call: Any) -> list[dict[str, Any]]:
        try:
            found: list[dict[str, Any]] = call()
        except ClusterError as exc:
            if exc.code not in DRA_ABSENT:
                raise
            self.dra_unavailable = (
                f"{what}: {exc.code}: resource.k8s.io/v1 {DRA_ABSENT[exc.code]}"
                + (
                    "; a ClusterRole granting get and list on resourceslices and "
                    "resourceclaims of resource.k8s.io would let the views read it"
                    if exc.code == 403
                    else ""
                )
            )
            return []
        self.dra_unavailable = None
        return found

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        """Every ResourceSlice of ``driver``; [] when the cluster has no DRA API for us."""
        return self._optional_list(
            f"list ResourceSlices of {driver}", lambda: self._dra.resource_slices(driver)
        )

    def list_resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every ResourceClaim (of one namespace, or of all); [] when the cluster has no DRA
        API for us."""
        where = namespace or "all namespaces"
        return self._optional_list(
            f"list ResourceClaims in {where}", lambda: self._dra.resource_claims(namespace)
        )

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim, or None when there is none of that name."""
        return self._dra.resource_claim(namespace, name)

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The template, or None when there is none of that name (or no DRA API)."""
        try:
            with translated(f"get ResourceClaimTemplate {namespace}/{name}"):
                return _body(
                    self._resource.read_namespaced_resource_claim_template(
                        name, namespace, _preload_content=False, _request_timeout=self._timeout
                    )
                )
        except ClusterError as exc:
            if exc.code == 404:
                return None
            raise

    def create_resource_claim_template(self, namespace: str, manifest: dict[str, Any]) -> bool:
        """Create the template; False when one of that name exists already (409): templates
        are named after their spec, so that one asks the same."""
        return self._exists_ok(
            f"create ResourceClaimTemplate in {namespace}",
            lambda: self._resource.create_namespaced_resource_claim_template(
                namespace, manifest, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def create_resource_claim(self, namespace: str, manifest: dict[str, Any]) -> bool:
        """Create the claim; False when one of that name exists already (409)."""
        return self._exists_ok(
            f"create ResourceClaim in {namespace}",
            lambda: self._resource.create_namespaced_resource_claim(
                namespace, manifest, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def _exists_ok(self, what: str, call: Any) -> bool:
        try:
            with translated(what):
                drained(call())
        except ClusterError as exc:
            if exc.code == 409:
                return False
            raise
        return True

    # --- writing ---------------------------------------------------------------------

    def create_pod(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        with translated(f"create pod in {namespace}"):
            return _body(
                self._core.create_namespaced_pod(
                    namespace, manifest, _preload_content=False, _request_timeout=self._timeout
                )
            )

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        with translated(f"create job in {namespace}"):
            return _body(
                self._batch.create_namespaced_job(
                    namespace, manifest, _preload_content=False, _request_timeout=self._timeout
                )
            )

    def delete_pod(self, namespace: str, name: str, *, grace_period_s: int | None = None) -> bool:
        """Delete a pod; False when it was already gone."""
        body: dict[str, Any] = {}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        return self._gone_ok(
            f"delete pod {namespace}/{name}",
            lambda: self._core.delete_namespaced_pod(
                name, namespace, body=body, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def delete_job(self, namespace: str, name: str) -> bool:
        """Delete a Job and (in the background) its pods; False when it was already gone."""
        body = {"propagationPolicy": "Background"}
        return self._gone_ok(
            f"delete job {namespace}/{name}",
            lambda: self._batch.delete_namespaced_job(
                name, namespace, body=body, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    def _gone_ok(self, what: str, call: Any) -> bool:
        try:
            with translated(what):
                call()
        except ClusterError as exc:
            if exc.code == 404:
                return False
            raise
        return True
