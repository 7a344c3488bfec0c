"""The CLUSTER / inventory YAML of DESIGN.md, and a cluster read from a ``kubectl`` dump.

One format serves ``vslice plan``, the lab's simulated nodes and the device plugin's static
backend: ``nodes: [{name, gpus: [{uuid, model, memory_mib, cores, slots, index, numa,
healthy, cordoned, used}], topology}]`` with optional ``quotas`` per namespace.

:func:`cluster_from_dump` reads ``kubectl get nodes,pods -A -o yaml`` as the extender reads
the live cluster (:mod:`vslice_core.clusterobjects`): nodes carrying ``vslice.io/node-gpus``
(or HAMi's ``hami.io/node-nvidia-register``) become nodes, and every pod that is not finished
and carries ``vslice.io/allocation`` counts as used, so an operator can ask "why does my pod
not fit?" against a real cluster offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vslice_core.annotations import ALLOCATION, HAMI_NODE_REGISTER, NODE_GPUS
from vslice_core.clusterobjects import (
    allocation_value,
    annotations_of,
    node_inventory,
    object_name,
    pod_allocation,
    pod_finished,
)
from vslice_core.errors import InvalidRequest
from vslice_core.ledger import Ledger, charges
from vslice_core.model import (
    Gpu,
    GpuUsage,
    NamespaceQuota,
    NodeInventory,
    validation_message,
)


class ClusterGpu(Gpu):
    """A GPU of the CLUSTER file: the inventory entry plus what is already used on it."""

    used: GpuUsage = Field(default_factory=GpuUsage)


class ClusterNode(NodeInventory):
    gpus: list[ClusterGpu] = Field(default_factory=list)  # type: ignore[assignment]
    kubelet: bool = Field(
        default=False,
        description="Local lab only: run this node as a real kubelet with containerd (the "
        "fake driver standing in for its GPUs) instead of simulating it; ignored elsewhere.",
    )
    dra_gpus: list[int] = Field(
        default_factory=list,
        description="Local lab only: indices of the GPUs served on the DRA path (published in "
        "the node's ResourceSlice, kept out of its annotation and extended resources).",
    )

    def inventory(self) -> NodeInventory:
        gpus = [Gpu.model_validate(gpu.model_dump(exclude={"used"})) for gpu in self.gpus]
        return NodeInventory(name=self.name, gpus=gpus, topology=self.topology)

    def usage(self) -> dict[str, GpuUsage]:
        return {gpu.uuid: gpu.used for gpu in self.gpus if gpu.used != GpuUsage()}


class Cluster(BaseModel):
    """Nodes with their usage, and namespace quotas: what ``vslice plan`` reasons about."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: list[ClusterNode] = Field(default_factory=list)
    quotas: dict[str, NamespaceQuota] = Field(default_factory=dict)


def _first_error(error: ValidationError) -> InvalidRequest:
    field, message = validation_message(error)
    return InvalidRequest(message, field=field, value=error.errors()[0].get("input"))


def parse_cluster(data: Any) -> Cluster:
    """Validate an already loaded CLUSTER object."""
    if not isinstance(data, Mapping):
        raise InvalidRequest(
            f"cluster must be a mapping with 'nodes', got {type(data).__name__}",
            field="cluster",
            value=data,
        )
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as error:
        raise _first_error(error) from None
    names = [node.name for node in cluster.nodes]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise InvalidRequest(
            f"nodes[].name must be unique, got {twice!r} twice", field="nodes", value=twice
        )
    return cluster


def _syntax_error(error: yaml.YAMLError, what: str) -> InvalidRequest:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or "not valid YAML"
    return InvalidRequest(
        f"{what} must be valid YAML or JSON, got {problem}{where}", field=what, value=None
    )


def load_yaml(text: str, what: str) -> Any:
    """YAML (or JSON) text as data; syntax errors become InvalidRequest naming ``what``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise _syntax_error(error, what) from None


def load_yaml_documents(text: str, what: str) -> list[Any]:
    """Every document of a multi-document YAML text (empty ones dropped), errors as above."""
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise _syntax_error(error, what) from None


def load_cluster(text: str) -> Cluster:
    return parse_cluster(load_yaml(text, "cluster"))


def _items(data: Any) -> list[Mapping[str, Any]]:
    items = data.get("items") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        raise InvalidRequest(
            "dump must be a Kubernetes List with 'items' (kubectl get nodes,pods -A -o yaml), "
            f"got {type(data).__name__}",
            field="items",
            value=None,
        )
    return [item for item in items if isinstance(item, Mapping)]


def _live_allocations(items: list[Mapping[str, Any]]) -> list[Any]:
    allocations = []
    for item in items:
        if item.get("kind") != "Pod" or pod_finished(item):
            continue
        try:
            allocation = pod_allocation(item)
        except InvalidRequest as error:
            raise InvalidRequest(
                f"pod {object_name(item)}: {error}", field=ALLOCATION, value=allocation_value(item)
            ) from None
        if allocation is not None:
            allocations.append(allocation)
    return allocations


def cluster_from_dump(data: Any) -> Cluster:
    """The cluster as ``kubectl get nodes,pods -A -o yaml`` shows it (no quotas), read as the
    extender reads it (:mod:`vslice_core.clusterobjects`)."""
    items = _items(data)
    inventories: dict[str, NodeInventory] = {}
    for item in items:
        if item.get("kind") != "Node":
            continue
        name = object_name(item)
        try:
            inventory = node_inventory(item)
        except InvalidRequest as error:
            field = NODE_GPUS if NODE_GPUS in annotations_of(item) else HAMI_NODE_REGISTER
            raise InvalidRequest(
                f"node {name}: {error}", field=field, value=annotations_of(item).get(field)
            ) from None
        if inventory is not None:
            inventories[name] = inventory
    used: dict[tuple[str, str], list[int]] = {}
    for allocation in _live_allocations(items):
        for uuid, usage in charges(allocation).items():
            total = used.setdefault((allocation.node, uuid), [0, 0, 0])
            total[0] += usage.slots
            total[1] += usage.memory_mib
            total[2] += usage.cores
    nodes = [_cluster_node(inventory, used) for inventory in inventories.values()]
    return Cluster(nodes=nodes)


def _cluster_node(inventory: NodeInventory, used: dict[tuple[str, str], list[int]]) -> ClusterNode:
    gpus = []
    for gpu in inventory.gpus:
        slots, memory, cores = used.get((inventory.name, gpu.uuid), [0, 0, 0])
        taken = GpuUsage(slots=slots, memory_mib=memory, cores=cores)
        gpus.append(ClusterGpu(**gpu.model_dump(), used=taken))
    return ClusterNode(name=inventory.name, gpus=gpus, topology=inventory.topology)


def build_ledger(cluster: Cluster) -> Ledger:
    ledger = Ledger()
    for node in cluster.nodes:
        ledger.set_node(node.inventory(), node.usage())
    for namespace, quota in cluster.quotas.items():
        ledger.set_quota(namespace, quota)
    return ledger
