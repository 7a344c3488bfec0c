"""The extender and nodes whose GPUs are all on the DRA path (their node agent lists no GPU in
the inventory annotation), for pods that ask whole GPUs by ``nvidia.com/gpu`` alone: a
DeviceClass maps that name (KEP-5004), kube-scheduler's DRA plugin has found the GPUs on such a
node before the extender is asked, so the extender passes it and binds there without an
allocation. Sliced pods, and nodes without vslice's node agent, are never passed that way.

The real HTTP routes over a real ledger, fed by the watch handlers; binds go to the fake
cluster of ``test_extender_trust``.
"""

from __future__ import annotations

from typing import Any

from test_extender_http import node, pod
from test_extender_trust import Served, served  # noqa: F401 (the fixture)
from vslice_core.annotations import ALLOCATION

DRA_ONLY = "dra-only"


def bind(extender: Served, name: str, node_name: str) -> dict[str, Any]:
    body = {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-{name}", "Node": node_name}
    result: dict[str, Any] = extender.post("bind", body).json()
    return result


def with_dra_node(extender: Served) -> None:
    """n1 and n2 have GPUs on the extender path; dra-only has none (all on DRA)."""
    extender.nodes.apply("ADDED", node(DRA_ONLY))


def pending(extender: Served, name: str, **limits: str) -> dict[str, Any]:
    """A pod the watch and the cluster both know, not yet bound."""
    manifest = pod(name, **limits)
    extender.pods.apply("ADDED", manifest)
    extender.cluster.pods[name] = manifest
    return manifest


def test_a_pod_asking_the_count_alone_is_passed_to_the_dra_nodes_and_bound_there_plainly(
    served: Served,  # noqa: F811
) -> None:
    with_dra_node(served)
    whole = pending(served, "whole", gpu="1")
    answer = served.filter(whole, ["n1", DRA_ONLY, "not-vslice"])
    assert answer["NodeNames"] == [DRA_ONLY]
    assert served.extender.holds.node("uid-whole") is None  # nothing held on n1
    assert bind(served, "whole", DRA_ONLY) == {"Error": ""}
    assert served.cluster.bound["whole"] == (DRA_ONLY, {})
    assert served.ledger.allocation("uid-whole") is None
    assert 'reason="dra_extended_resource"' in served.metrics()


def test_without_a_dra_node_among_the_candidates_the_extender_places_a_whole_gpu(
    served: Served,  # noqa: F811
) -> None:
    with_dra_node(served)
    whole = pending(served, "whole", gpu="1")
    (chosen,) = served.filter(whole, ["n1", "n2", "not-vslice"])["NodeNames"]
    assert chosen in {"n1", "n2"}
    assert bind(served, "whole", chosen) == {"Error": ""}
    node_name, annotations = served.cluster.bound["whole"]
    assert node_name == chosen and ALLOCATION in annotations


def test_a_sliced_pod_is_never_passed_to_a_dra_node_nor_bound_there(
    served: Served,  # noqa: F811
) -> None:
    with_dra_node(served)
    sliced = pending(served, "sliced", gpu="1", mem="1024")
    answer = served.filter(sliced, [DRA_ONLY])
    assert answer["NodeNames"] in (None, [])
    assert DRA_ONLY in answer["FailedNodes"] or DRA_ONLY in answer.get(
        "FailedAndUnresolvableNodes", {}
    )
    refused = bind(served, "sliced", DRA_ONLY)
    assert "all its GPUs are on the DRA path" in refused["Error"]
    assert "sliced" not in served.cluster.bound


def test_a_node_without_vslices_agent_is_not_passed_for_a_count_alone(
    served: Served,  # noqa: F811
) -> None:
    whole = pod("whole", gpu="1")
    served.pods.apply("ADDED", whole)
    (chosen,) = served.filter(whole, ["not-vslice", "n2"])["NodeNames"]
    assert chosen == "n2"
