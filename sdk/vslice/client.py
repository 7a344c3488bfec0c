"""``Client``: the SDK's one entry point to a cluster.

Connection lookup order (first match wins), as kubectl does it:

1. the ``kubeconfig`` argument;
2. ``$KUBECONFIG`` (the first existing file of a ``:``-separated list);
3. ``~/.kube/config``;
4. the in-cluster service account (a notebook server running in a pod).

The namespace is the ``namespace`` argument, else ``$VSLICE_NAMESPACE``, else the kubeconfig
context's namespace (or, in a pod, the pod's own), else ``default``.

The API is synchronous and blocking on purpose: it performs plain HTTP calls and never
touches an asyncio event loop, so it works the same in a script and inside a running
Jupyter kernel (whose loop is already running and would refuse ``asyncio.run``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from vslice_core.dra import DRIVER
from vslice_kube.workloads import Workloads

from vslice import dra, manifests
from vslice.errors import ClusterError, InvalidRequest
from vslice.plans import Plan, plan_manifest, slice_manifest
from vslice.slices import Slice
from vslice.snapshot import ClusterSnapshot
from vslice.tables import AllocationTable, GpuTable
from vslice.workload import Workload

SliceLike = Slice | Mapping[str, Any]


def as_slice(value: SliceLike) -> Slice:
    """A Slice, or a mapping of Slice arguments (``{"memory": "10Gi", "cores": 30}``)."""
    if isinstance(value, Slice):
        return value
    if isinstance(value, Mapping):
        return Slice(**dict(value))
    raise InvalidRequest(
        f"slice must be a vslice.Slice or a mapping, got {type(value).__name__}", field="slice"
    )


class Client:
    """A connection to one cluster, with the SDK's calls on it."""

    def __init__(
        self,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        namespace: str | None = None,
    ) -> None:
        self._calls, default_namespace = Workloads.connect(kubeconfig)
        self.namespace = namespace or os.environ.get("VSLICE_NAMESPACE") or default_namespace

    def __repr__(self) -> str:
        host = getattr(self._calls.api_client.configuration, "host", "?")
        return f"<vslice.Client {host} namespace={self.namespace}>"

    def close(self) -> None:
        self._calls.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading the cluster -------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        """Nodes and pods read once, and the DRA path's ResourceSlices and ResourceClaims;
        every view below is built from one snapshot. A cluster without the DRA API (or a
        user not allowed to read it) gives the extender path only, and ``problems`` says so
        once."""
        return self._read()[0]

    def _read(self) -> tuple[ClusterSnapshot, list[dict[str, Any]]]:
        """The snapshot and the pods it was read from."""
        nodes, pods = self._calls.list_nodes(), self._calls.list_pods()
        slices = self._calls.list_resource_slices(DRIVER)
        absent = self._calls.dra_unavailable
        claims = [] if absent else self._calls.list_resource_claims()
        absent = absent or self._calls.dra_unavailable
        workloads = self._calls.kueue.workloads()
        snapshot = ClusterSnapshot.read(
            nodes,
            pods,
            slices,
            claims,
            templates=None if absent else self._calls.get_resource_claim_template,
            workloads=workloads,
        )
        if absent:
            snapshot.problems.append(f"DRA allocations are not shown: {absent}")
        if self._calls.kueue.forbidden:
            # A cluster without Kueue is normal; one whose queues we may not read is not.
            snapshot.problems.append(f"queued jobs are not shown: {self._calls.kueue.unavailable}")
        return snapshot, pods

    def gpus(self) -> GpuTable:
        """Every GPU: capacity, what is allocated, and the pods holding slices."""
        return self.snapshot().gpus()

    def allocations(self, namespace: str | None = None) -> AllocationTable:
        """GPU grants of live pods in ``namespace`` (all namespaces when None). A pod whose
        deletion has begun still holds its slice until it is gone, and shows the phase
        ``Terminating``."""
        return self.snapshot().allocations(namespace)

    def plan(
        self,
        request: SliceLike | Mapping[str, Any] | str,
        *,
        namespace: str | None = None,
        snapshot: ClusterSnapshot | None = None,
    ) -> Plan:
        """Would ``request`` (a Slice, or a Pod/Job manifest as a dict or YAML text) fit
        now, where, and if not, why, per node. Raises InvalidRequest for a GPU type or UUID
        the cluster lacks. A DRA pod's claims and templates are read from the YAML text (the
        documents beside the pod), else from the cluster."""
        wanted, manifest, beside = self._as_manifest(request)
        ns = namespace or _manifest_namespace(manifest) or self.namespace
        return plan_manifest(
            snapshot or self.snapshot(),
            manifest,
            slice=wanted,
            namespace=ns,
            claims=dra.chain(_in_namespace(beside, ns), self._claim_lookup),
        )

    def _claim_lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        if kind == "ResourceClaim":
            return self._calls.get_resource_claim(namespace, name)
        return self._calls.get_resource_claim_template(namespace, name)

    # --- creating workloads --------------------------------------------------------------

    def run(
        self,
        image: str,
        command: str | Sequence[str] | None = None,
        *,
        slice: SliceLike,
        name: str | None = None,
        namespace: str | None = None,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        kind: Literal["Pod", "Job"] = "Pod",
        queue: bool | str = False,
    ) -> Workload:
        """Run ``image`` with a GPU slice as a Pod (or a Job). The request is checked
        against the live cluster first: a bad value or an unknown GPU type raises
        InvalidRequest and, unless ``queue`` is given, a request that cannot fit now raises
        NoFit (with the reasons per node) — in both cases nothing is created.

        ``queue=True`` creates it all the same (it waits for room as a pending pod);
        ``queue="team-a"`` names a Kueue LocalQueue of the namespace: a Job is created
        suspended in that queue and starts when Kueue admits it (its quota, borrowing and
        fair sharing; docs/kueue.md). ``job.status.queue`` then says where it stands."""
        wanted = as_slice(slice)
        pod = manifests.pod_manifest(
            image, command, slice=wanted, name=name, env=env, labels=labels
        )
        queued = isinstance(queue, str)
        manifest = manifests.job_manifest(pod) if kind == "Job" or queued else pod
        return self._create(manifest, wanted, namespace, queue, "main")

    def submit(
        self,
        manifest: Mapping[str, Any] | str,
        *,
        slice: SliceLike | None = None,
        container: str | None = None,
        namespace: str | None = None,
        queue: bool | str = False,
    ) -> Workload:
        """Create a Pod or Job from a manifest (a dict or YAML text), optionally putting
        ``slice`` on one container (default: the first). Checked like :meth:`run`, ``queue``
        included (a LocalQueue's name queues a Job in Kueue; a Pod cannot be). YAML text
        may hold, beside the workload, the ResourceClaimTemplates and ResourceClaims it
        names: they are created first (one that exists already is kept)."""
        body, beside = _load_manifest(manifest)
        wanted = as_slice(slice) if slice is not None else None
        if wanted is not None:
            body = manifests.apply_slice(body, wanted, container)
        return self._create(body, wanted, namespace, queue, container, beside)

    def workload(
        self, name: str, *, kind: Literal["Pod", "Job"] = "Pod", namespace: str | None = None
    ) -> Workload:
        """A handle on an existing Pod or Job."""
        return Workload(
            self._calls, kind, namespace or self.namespace, name, snapshot=self.snapshot
        )

    def _create(
        self,
        manifest: dict[str, Any],
        wanted: Slice | None,
        namespace: str | None,
        queue: bool | str,
        container: str | None = None,
        beside: Sequence[Mapping[str, Any]] = (),
    ) -> Workload:
        ns = _resolve_namespace(manifest, namespace) or self.namespace
        if isinstance(queue, str):
            manifest = manifests.in_local_queue(manifest, queue)
            self._check_local_queue(queue, ns)
        objects = _in_namespace(beside, ns)
        if wanted is not None and wanted.path == "dra":
            template = manifests.claim_template(
                wanted, manifests.container_name(manifest, container), ns
            )
            objects[("ResourceClaimTemplate", ns, template["metadata"]["name"])] = template
        snapshot = self.snapshot()
        plan = plan_manifest(
            snapshot,
            manifest,
            slice=wanted,
            namespace=ns,
            claims=dra.chain(objects, self._claim_lookup),
        )
        if not queue and not self._may_preempt(wanted, plan, snapshot):
            plan.raise_for_fit()
        # The claims first: a pod naming a template that does not exist yet waits for it.
        for (kind, where, _), body in objects.items():
            if kind == "ResourceClaimTemplate":
                self._calls.create_resource_claim_template(where, dict(body))
            else:
                self._calls.create_resource_claim(where, dict(body))
        if manifest["kind"] == "Job":
            created = self._calls.create_job(ns, manifest)
        else:
            created = self._calls.create_pod(ns, manifest)
        return Workload(
            self._calls, manifest["kind"], ns, created["metadata"]["name"], snapshot=self.snapshot
        )

    def _check_local_queue(self, queue: str, namespace: str) -> None:
        """The LocalQueue must exist in the namespace: a Job labelled for a queue that does
        not exist would wait suspended for ever."""
        if not queue:
            raise InvalidRequest(
                "queue: a LocalQueue's name, True or False, got an empty name",
                field="queue",
                value=queue,
            )
        found = self._calls.kueue.local_queues(namespace)
        names = sorted(str(q["metadata"]["name"]) for q in found)
        if queue in names:
            return
        if self._calls.kueue.unavailable:
            why = self._calls.kueue.unavailable
        else:
            why = f"namespace {namespace} has " + (
                f"the queues {', '.join(names)}" if names else "no LocalQueue"
            )
        raise InvalidRequest(
            f"queue: no Kueue LocalQueue {queue!r} in namespace {namespace}: {why} (an "
            "administrator creates them, docs/kueue.md; queue=True waits without Kueue)",
            field="queue",
            value=queue,
        )

    def local_queues(self, namespace: str | None = None) -> list[str]:
        """The names of the Kueue LocalQueues jobs of ``namespace`` (default: the client's)
        can be queued in; [] when there are none or Kueue is not installed."""
        found = self._calls.kueue.local_queues(namespace or self.namespace)
        return sorted(str(q["metadata"]["name"]) for q in found)

    def _may_preempt(self, wanted: Slice | None, plan: Plan, snapshot: ClusterSnapshot) -> bool:
        """Whether a slice that does not fit now is created all the same because its
        PriorityClass outranks a running slice: preemption may make room for it
        (docs/preemption.md). A PriorityClass that does not exist is refused here."""
        if wanted is None or wanted.priority_class is None:
            return False
        value = self._priority_value(wanted.priority_class)
        if plan.fits or value is None:
            return False
        return any(pod.priority < value for pod in snapshot.pods)

    def _priority_value(self, name: str) -> int | None:
        """The PriorityClass's value; None when the classes cannot be read (the API server
        then checks the name itself when the pod is created)."""
        try:
            classes = self._calls.list_priority_classes()
        except ClusterError:
            return None
        values = {
            str((c.get("metadata") or {}).get("name", "")): int(c.get("value") or 0)
            for c in classes
        }
        if name not in values:
            known = ", ".join(f"{n} ({v})" for n, v in sorted(values.items(), key=lambda i: -i[1]))
            raise InvalidRequest(
                f"priority_class: no PriorityClass {name!r} in this cluster; it has "
                f"{known or 'none'} (an administrator creates them)",
                field="priority_class",
                value=name,
            )
        return values[name]

    def _as_manifest(
        self, request: SliceLike | Mapping[str, Any] | str
    ) -> tuple[Slice | None, dict[str, Any], list[Mapping[str, Any]]]:
        if isinstance(request, Slice) or (
            isinstance(request, Mapping) and "kind" not in request and "spec" not in request
        ):
            wanted = as_slice(request)
            return wanted, slice_manifest(wanted), []
        body, beside = _load_manifest(request)
        return None, body, beside


def _load_manifest(
    manifest: Mapping[str, Any] | str,
) -> tuple[dict[str, Any], list[Mapping[str, Any]]]:
    """The workload, and (YAML text only) the claims and templates beside it."""
    beside: list[Mapping[str, Any]] = []
    if isinstance(manifest, str):
        documents = dra.load_documents(manifest, "manifest")
        if not documents:
            raise InvalidRequest("manifest must be a Pod or Job, got no document", field="manifest")
        manifest, found = dra.split_documents(documents, "manifest")
        beside = [copy.deepcopy(dict(item)) for item in found.values()]
    if not isinstance(manifest, Mapping):
        raise InvalidRequest(
            f"manifest must be a Pod or Job mapping, got {type(manifest).__name__}",
            field="manifest",
        )
    body = copy.deepcopy(dict(manifest))  # never change the caller's manifest
    manifests.pod_template(body)  # validates kind and shape
    return body, beside


def _in_namespace(
    objects: Sequence[Mapping[str, Any]], namespace: str
) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """Claims and templates keyed ``(kind, namespace, name)``; one without a namespace goes
    to the workload's (a pod can only name claims of its own namespace)."""
    found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for item in objects:
        metadata = dict(item.get("metadata") or {})
        metadata["namespace"] = metadata.get("namespace") or namespace
        body = {**item, "metadata": metadata}
        found[(str(item.get("kind")), metadata["namespace"], str(metadata.get("name")))] = body
    return found


def _manifest_namespace(manifest: Mapping[str, Any]) -> str | None:
    namespace = (manifest.get("metadata") or {}).get("namespace")
    return str(namespace) if namespace else None


def _resolve_namespace(manifest: dict[str, Any], namespace: str | None) -> str | None:
    declared = _manifest_namespace(manifest)
    if declared and namespace and declared != namespace:
        raise InvalidRequest(
            f"the manifest says namespace {declared!r} but namespace={namespace!r} was given",
            field="namespace",
            value=namespace,
        )
    return declared or namespace
