"""The control-plane role's filter that decides whether its apply changed vslice's objects.

The results are shaped as kubernetes.core.k8s returns them for one loop item: one object's
result (``changed``, ``method``, ``result``, ``diff``) or, for a file of several objects,
those nested under ``result.results``. The cluster scenario runs the filter on the module's
real output (its idempotence step fails when the filter counts a change)."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

from bringup import ROLES

PLUGIN = ROLES / "vslice_control_plane" / "filter_plugins" / "applied_changes.py"


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("applied_changes", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc(
    kind: str, name: str, *, method: str = "apply", changed: bool = False, **diff: Any
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "changed": changed,
        "method": method,
        "result": {"kind": kind, "metadata": {"name": name, "namespace": "vslice-system"}},
    }
    if diff:
        doc["diff"] = diff
    return doc


def _file(*docs: dict[str, Any]) -> dict[str, Any]:
    return {"changed": any(d["changed"] for d in docs), "result": {"results": list(docs)}}


def test_the_token_label_and_data_kubernetes_writes_are_not_vslices_change() -> None:
    changes = _plugin().applied_changes(
        _file(
            _doc("ServiceAccount", "vslice-node"),
            _doc(
                "Secret",
                "vslice-node-token",
                changed=True,
                before={"metadata": {"resourceVersion": "10", "labels": {}}},
                after={
                    "metadata": {
                        "resourceVersion": "11",
                        "labels": {"kubernetes.io/legacy-token-last-used": "2026-12-05"},
                        "managedFields": [{"manager": "kube-apiserver"}],
                    },
                    "data": {"token": "aGlkZGVu"},
                },
            ),
        )
    )
    assert changes == {
        "changed": [],
        "ignored": [
            "Secret vslice-system/vslice-node-token: data, "
            "metadata.labels.kubernetes.io/legacy-token-last-used, "
            "metadata.managedFields, metadata.resourceVersion"
        ],
    }


def test_a_policy_status_written_meanwhile_is_ignored_but_a_spec_change_counts() -> None:
    plugin = _plugin()
    status_only = _doc(
        "ValidatingAdmissionPolicy",
        "vslice-state-annotations",
        changed=True,
        before={"status": {}},
        after={"status": {"observedGeneration": 1, "typeChecking": {}}},
    )
    assert plugin.applied_changes(status_only)["changed"] == []
    spec_too = _doc(
        "ValidatingAdmissionPolicy",
        "vslice-state-annotations",
        changed=True,
        before={"spec": {"failurePolicy": "Ignore"}, "status": {}},
        after={"spec": {"failurePolicy": "Fail"}, "status": {"observedGeneration": 2}},
    )
    assert plugin.applied_changes(spec_too)["changed"] == [
        "ValidatingAdmissionPolicy vslice-system/vslice-state-annotations: spec.failurePolicy"
    ]


def test_vslices_own_labels_and_data_count() -> None:
    plugin = _plugin()
    label = _doc(
        "Namespace",
        "team-a",
        changed=True,
        before={"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}},
        after={"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    assert plugin.applied_changes(label)["changed"] == [
        "Namespace vslice-system/team-a: metadata.labels.pod-security.kubernetes.io/enforce"
    ]
    dashboard = _doc(
        "ConfigMap",
        "vslice-dashboard",
        changed=True,
        before={"data": {"vslice.json": "{}"}},
        after={"data": {"vslice.json": '{"panels": []}'}},
    )
    assert plugin.applied_changes(dashboard)["changed"] == [
        "ConfigMap vslice-system/vslice-dashboard: data.vslice.json"
    ]


def test_a_created_object_and_a_change_without_a_diff_count() -> None:
    changes = _plugin().applied_changes(
        _file(
            _doc("Namespace", "vslice-system", method="create", changed=True),
            _doc("ClusterRole", "vslice-viewer", changed=True),
            _doc("ClusterRole", "vslice-node"),
        )
    )
    assert changes == {
        "changed": [
            "Namespace vslice-system/vslice-system: created",
            "ClusterRole vslice-system/vslice-viewer: changed",
        ],
        "ignored": [],
    }


def test_an_object_server_side_apply_created_counts_as_created() -> None:
    created = _doc(
        "Namespace",
        "vslice-system",
        changed=True,
        before={},
        after={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vslice-system"}},
    )
    assert _plugin().applied_changes(created)["changed"] == [
        "Namespace vslice-system/vslice-system: created"
    ]


def test_a_failed_item_without_results_has_no_changes() -> None:
    assert _plugin().applied_changes({"failed": True, "msg": "no"}) == {
        "changed": [],
        "ignored": [],
    }


def test_ansible_finds_the_filter_under_its_name() -> None:
    assert set(_plugin().FilterModule().filters()) == {"vslice_applied_changes"}
