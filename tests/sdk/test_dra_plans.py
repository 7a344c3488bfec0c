"""Plans, manifests and the client on the DRA path: a pod whose claims name vslice's device
class is answered by the same engine, with what kube-scheduler's DRA allocator does not do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from api_objects import NoKueue
from dra_objects import bare_node, claim, claim_spec, device, dra_pod, resource_slice, result
from dra_objects import template as claim_template
from kubernetes import client as k8s
from vslice import InvalidRequest, NoFit, Slice, Timeout, dra
from vslice.cli import main
from vslice.client import Client
from vslice.manifests import claim_template as slice_template
from vslice.manifests import job_manifest, pod_manifest
from vslice.plans import plan_manifest
from vslice.snapshot import ClusterSnapshot
from vslice_core.errors import ClusterError
from vslice_kube.workloads import Workloads

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
SPREAD = {"vslice.io/node-policy": "spread", "vslice.io/gpu-policy": "binpack"}


def cluster() -> ClusterSnapshot:
    slices = [resource_slice("node-c", [device(0, "GPU-c-0"), device(1, "GPU-c-1")])]
    claims = [claim("team-d", "held", results=[result("node-c")], reserved=[("a", "u-a")])]
    return ClusterSnapshot.read([bare_node("node-c")], [], slices, claims)


def pod_manifest_for(template: str = "vslice-gpu-8gi", **fields: Any) -> dict[str, Any]:
    pod = dra_pod("team-d", "train", phase="Pending", template_name=template, **fields)
    pod.pop("status")
    return pod


def templates(*items: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        ("ResourceClaimTemplate", t["metadata"]["namespace"], t["metadata"]["name"]): t
        for t in items
    }


def test_a_dra_pod_is_planned_by_the_engine_with_its_notes() -> None:
    manifest = pod_manifest_for(annotations=SPREAD)
    known = templates(claim_template("team-d", "vslice-gpu-8gi"))
    plan = plan_manifest(cluster(), manifest, namespace="team-d", claims=known)
    assert plan.fits and plan.path == "dra"
    (grant,) = plan.grants["main"]
    assert (grant.memory_mib, grant.cores) == (8192, 30)
    assert plan.notes == (
        "on the DRA path kube-scheduler places this pod: node policy 'spread' is not applied "
        "(DRA picks nodes its own way)",
        "on the DRA path kube-scheduler places this pod: GPU policy 'binpack' is not applied "
        "(DRA takes the first device that fits)",
    )
    text = str(plan).splitlines()
    assert text[-3].startswith("on the DRA path kube-scheduler's DRA allocator places this pod")
    assert text[-2].strip() == plan.notes[0]
    result_json = plan.to_dict()
    assert result_json["dra"]["path"] == "dra" and result_json["dra"]["notes"] == list(plan.notes)
    assert result_json["fits"] is True
    html = plan._repr_html_()
    assert "node policy &#x27;spread&#x27; is not applied" in html


def test_an_extender_plan_carries_no_dra_key() -> None:
    wanted = Slice("1Gi")
    from vslice.plans import slice_manifest

    plan = plan_manifest(cluster(), slice_manifest(wanted), slice=wanted)
    assert plan.path == "extender" and "dra" not in plan.to_dict()
    assert "DRA" not in str(plan)


def test_a_dra_pod_that_fits_nowhere_gets_the_engines_why_not() -> None:
    big = claim_template("team-d", "vslice-big", claim_spec(memory="90Gi", cores=None))
    plan = plan_manifest(
        cluster(), pod_manifest_for("vslice-big"), namespace="team-d", claims=templates(big)
    )
    assert not plan.fits
    assert plan.why_not().startswith("does not fit: asks 90 GiB per GPU; the largest GPU here")


def test_a_selector_the_plan_cannot_judge_is_said() -> None:
    odd = claim_template("team-d", "vslice-odd")
    exactly = odd["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly["selectors"] = [
        {"cel": {"expression": 'device.attributes["gpu.vslice.io"].index == 1'}}
    ]
    plan = plan_manifest(
        cluster(), pod_manifest_for("vslice-odd"), namespace="team-d", claims=templates(odd)
    )
    assert plan.notes == (
        "the plan leaves out: request main: selector "
        "'device.attributes[\"gpu.vslice.io\"].index == 1' is not judged by the plan",
    )


def test_a_template_that_is_nowhere_is_an_invalid_request_naming_the_field() -> None:
    with pytest.raises(InvalidRequest) as caught:
        plan_manifest(cluster(), pod_manifest_for("vslice-nope"), namespace="team-d")
    assert caught.value.field == "spec.resourceClaims[0].resourceClaimTemplateName"
    assert "ResourceClaimTemplate team-d/vslice-nope, which does not exist" in str(caught.value)


def test_a_named_claim_is_read_from_the_lookup() -> None:
    manifest = pod_manifest_for(claim_name="mine")
    mine = claim("team-d", "mine", spec=claim_spec(memory="2Gi", cores="5"))
    plan = plan_manifest(
        cluster(), manifest, namespace="team-d", claims={("ResourceClaim", "team-d", "mine"): mine}
    )
    assert plan.fits and plan.grants["main"][0].memory_mib == 2048


# --- vslice plan, offline --------------------------------------------------------------------


def write(folder: Path, name: str, *documents: Any) -> str:
    path = folder / name
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def test_vslice_plan_reads_the_template_beside_the_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = pod_manifest_for(annotations={"vslice.io/node-policy": "spread"})
    manifest["metadata"].pop("namespace")
    template = claim_template("team-d", "vslice-gpu-8gi")
    template["metadata"].pop("namespace")
    pod = write(tmp_path, "pod.yaml", template, manifest)
    status = main(["plan", str(EXAMPLES / "cluster.yaml"), pod, "--json"])
    answer = json.loads(capsys.readouterr().out)
    # Binpack (the default, and what the DRA estimate assumes): the smallest GPU that holds it.
    assert status == 0 and answer["fits"] and answer["node"] == "node-t4"
    assert answer["dra"]["path"] == "dra"
    assert answer["dra"]["notes"] == [
        "on the DRA path kube-scheduler places this pod: node policy 'spread' is not applied "
        "(DRA picks nodes its own way)"
    ]
    assert main(["plan", str(EXAMPLES / "cluster.yaml"), pod]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "1 GPU with 8 GiB, 30% cores: fits on node-t4"
    assert text[-2].startswith("on the DRA path kube-scheduler's DRA allocator places this pod")


def test_vslice_plan_names_a_template_missing_from_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = write(tmp_path, "pod.yaml", pod_manifest_for("vslice-elsewhere"))
    assert main(["plan", str(EXAMPLES / "cluster.yaml"), pod]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "vslice plan: spec.resourceClaims[0].resourceClaimTemplateName names "
        "ResourceClaimTemplate team-d/vslice-elsewhere, which is not in POD or CLUSTER"
    )
    assert err.count("\n") == 1


def test_vslice_plan_counts_the_claims_of_a_dump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # node-c has 80 GiB on each GPU; a claim holds 75 GiB of GPU 0 and 75 GiB of GPU 1.
    full = {"cores": "0", "memory": "75Gi", "slots": "1"}
    items = [
        {"kind": "Node", **bare_node("node-c")},
        resource_slice("node-c", [device(0, "GPU-c-0"), device(1, "GPU-c-1")]),
        claim("t", "a", results=[result("node-c", "gpu-0", **full)], reserved=[("a", "u")]),
        claim("t", "b", results=[result("node-c", "gpu-1", **full)], reserved=[("b", "v")]),
    ]
    dump = write(tmp_path, "dump.yaml", {"apiVersion": "v1", "kind": "List", "items": items})
    pod = write(
        tmp_path, "pod.yaml", claim_template("team-d", "vslice-gpu-8gi"), pod_manifest_for()
    )
    assert main(["plan", dump, pod, "--json"]) == 1
    answer = json.loads(capsys.readouterr().out)
    assert answer["nodes"]["node-c"]["reasons"] == {"insufficient_memory": 2}
    assert answer["dra"]["path"] == "dra"


def test_vslice_plan_of_an_extender_pod_is_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "pod.yaml"), "--json"]) in (
        0,
        1,
    )
    assert "dra" not in json.loads(capsys.readouterr().out)


# --- Slice(path="dra") ------------------------------------------------------------------------


def test_a_dra_slice_makes_a_pod_that_names_its_template() -> None:
    wanted = Slice("10Gi", cores=30, gpu_type="a100", path="dra")
    pod = pod_manifest("python:3.12", "nvidia-smi", slice=wanted, name="train")
    template = slice_template(wanted, "main", "team-d")
    (container,) = pod["spec"]["containers"]
    assert "limits" not in container["resources"]
    assert container["resources"]["claims"] == [{"name": "vslice-gpu", "request": "main"}]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "vslice-gpu", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    assert template["metadata"]["namespace"] == "team-d"
    assert template["metadata"]["name"].startswith("vslice-")
    assert len(template["metadata"]["name"]) == len("vslice-") + 12
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["capacity"]["requests"] == {"memory": "10240Mi", "cores": "30"}
    assert exactly["deviceClassName"] == "gpu.vslice.io"
    assert "a100" in exactly["selectors"][0]["cel"]["expression"]
    assert pod["metadata"]["annotations"] == {"vslice.io/gpu-type": "a100"}
    # A Job carries the same claim in its pod template.
    job = job_manifest(pod)
    assert job["spec"]["template"]["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]


def test_the_same_slice_names_the_same_template_and_another_slice_another() -> None:
    one = slice_template(Slice("10Gi", path="dra"))["metadata"]["name"]
    assert one == slice_template(Slice(10240, path="dra"))["metadata"]["name"]
    assert one != slice_template(Slice("11Gi", path="dra"))["metadata"]["name"]


def test_a_whole_card_dra_slice_asks_no_capacity() -> None:
    spec = slice_template(Slice("100%", path="dra"))["spec"]["spec"]
    assert "capacity" not in spec["devices"]["requests"][0]["exactly"]


@pytest.mark.parametrize("memory", ["50%", "1%"])
def test_a_partial_percentage_on_the_dra_path_names_memory_and_what_works(memory: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        Slice(memory, path="dra")
    assert caught.value.field == "memory"
    assert f"memory {memory} cannot be asked on the DRA path" in str(caught.value)
    assert "'8Gi'" in str(caught.value) and "path='extender'" in str(caught.value)
    Slice(memory)  # the extender path takes it


def test_an_unknown_path_is_refused_with_the_choices() -> None:
    with pytest.raises(InvalidRequest, match="path must be one of extender, dra, got 'hami'"):
        Slice("1Gi", path="hami")


def test_a_dra_slice_plans_on_the_dra_path() -> None:
    wanted = Slice("8Gi", cores=30, path="dra", node_policy="spread")
    from vslice.plans import slice_manifest

    plan = plan_manifest(cluster(), slice_manifest(wanted), slice=wanted, namespace="team-d")
    assert plan.fits and plan.path == "dra"
    assert plan.notes[0].endswith(
        "node policy 'spread' is not applied (DRA picks nodes its own way)"
    )
    assert str(plan).splitlines()[0] == "1 GPU, 8 GiB, 30% cores, DRA path: fits on node-c"


# --- the client, with the cluster's calls replaced ------------------------------------------


class FakeCalls:
    """What ``Workloads`` answers, recorded; ``dra`` False plays a cluster without the API."""

    kueue = NoKueue()

    def __init__(self, *, dra_api: bool = True) -> None:
        self.created: list[tuple[str, str, dict[str, Any]]] = []
        self.dra_api = dra_api
        self.dra_unavailable: str | None = None
        self.template_reads: list[tuple[str, str]] = []

    def list_nodes(self) -> list[dict[str, Any]]:
        return [bare_node("node-c")]

    def list_pods(self) -> list[dict[str, Any]]:
        return [dra_pod("team-d", "waits", phase="Pending", template_name="vslice-big")]

    def list_resource_slices(self, driver: str) -> list[dict[str, Any]]:
        if not self.dra_api:
            self.dra_unavailable = (
                "list ResourceSlices of gpu.vslice.io: 404: resource.k8s.io/v1 is not served "
                "(Kubernetes 1.34 or newer serves it)"
            )
            return []
        return [resource_slice("node-c", [device(0, "GPU-c-0")])]

    def list_resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []

    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return []

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.template_reads.append((namespace, name))
        if name == "vslice-big":
            return claim_template(namespace, name, claim_spec(memory="90Gi", cores=None))
        return None

    def create_resource_claim_template(self, namespace: str, body: dict[str, Any]) -> bool:
        self.created.append(("ResourceClaimTemplate", namespace, body))
        return False  # 409: it exists already, which is fine

    def create_resource_claim(self, namespace: str, body: dict[str, Any]) -> bool:
        self.created.append(("ResourceClaim", namespace, body))
        return True

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(("Pod", namespace, body))
        return {"metadata": {"name": "vslice-x1"}}


def client_with(calls: FakeCalls) -> Client:
    client = Client.__new__(Client)
    client._calls = calls  # type: ignore[assignment]
    client.namespace = "team-d"
    return client


def test_client_snapshot_reads_slices_claims_and_pending_templates() -> None:
    calls = FakeCalls()
    snapshot = client_with(calls).snapshot()
    assert [r.node for r in snapshot.gpus()] == ["node-c"]
    (pending,) = snapshot.pending
    assert pending.path == "dra" and calls.template_reads == [("team-d", "vslice-big")]
    assert snapshot.problems == []


def test_a_cluster_without_the_dra_api_shows_the_extender_path_and_says_so_once() -> None:
    snapshot = client_with(FakeCalls(dra_api=False)).snapshot()
    assert snapshot.gpus() == snapshot.gpus() and len(snapshot.gpus()) == 0
    assert snapshot.problems == [
        "DRA allocations are not shown: list ResourceSlices of gpu.vslice.io: 404: "
        "resource.k8s.io/v1 is not served (Kubernetes 1.34 or newer serves it)"
    ]
    assert snapshot.pending == []


def test_run_with_a_dra_slice_creates_the_template_then_the_pod() -> None:
    calls = FakeCalls()
    workload = client_with(calls).run("python:3.12", "nvidia-smi", slice=Slice("8Gi", path="dra"))
    assert workload.name == "vslice-x1"
    (kind, namespace, template), (pod_kind, _, pod) = calls.created
    assert (kind, namespace, pod_kind) == ("ResourceClaimTemplate", "team-d", "Pod")
    assert template["metadata"]["namespace"] == "team-d"
    name = template["metadata"]["name"]
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == name


def test_run_with_a_dra_slice_that_fits_nowhere_creates_nothing() -> None:
    calls = FakeCalls()
    with pytest.raises(NoFit, match="asks 90 GiB per GPU"):
        client_with(calls).run("python:3.12", slice=Slice("90Gi", path="dra"))
    assert calls.created == []


def test_submit_creates_the_claims_beside_the_workload() -> None:
    calls = FakeCalls()
    text = yaml.safe_dump_all([claim_template("team-d", "vslice-gpu-8gi"), pod_manifest_for()])
    client_with(calls).submit(text)
    assert [kind for kind, _, _ in calls.created] == ["ResourceClaimTemplate", "Pod"]


def test_client_plan_takes_a_multi_document_manifest() -> None:
    text = yaml.safe_dump_all([claim_template("team-d", "vslice-gpu-8gi"), pod_manifest_for()])
    plan = client_with(FakeCalls()).plan(text)
    assert plan.fits and plan.path == "dra" and plan.node == "node-c"


# --- the adapter -------------------------------------------------------------------------------


class Refusing:
    def __init__(self, code: int) -> None:
        self.code = code

    def resource_slices(self, driver: str) -> list[dict[str, Any]]:
        raise ClusterError(f"list ResourceSlices of {driver}: {self.code} nope", code=self.code)

    def resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        raise ClusterError(f"list ResourceClaims: {self.code} nope", code=self.code)


@pytest.mark.parametrize("code", [404, 403])
def test_the_adapter_gives_empty_dra_lists_when_the_api_is_absent_or_forbidden(
    code: int,
) -> None:
    calls = Workloads(k8s.ApiClient())
    calls._dra = Refusing(code)  # type: ignore[assignment]
    assert calls.list_resource_slices("gpu.vslice.io") == []
    assert calls.dra_unavailable is not None and f": {code}: resource.k8s.io/v1" in (
        calls.dra_unavailable
    )
    assert calls.list_resource_claims() == []


def test_the_adapter_lets_other_failures_through() -> None:
    calls = Workloads(k8s.ApiClient())
    calls._dra = Refusing(500)  # type: ignore[assignment]
    with pytest.raises(ClusterError):
        calls.list_resource_slices("gpu.vslice.io")


def test_the_dra_module_names_templates_like_the_webhook() -> None:
    spec = claim_spec()
    assert dra.template_name(spec) == dra.template_name(json.loads(json.dumps(spec)))
    assert dra.claim_template(spec, "ns")["spec"] == {"spec": spec}


# --- the workload handle ---------------------------------------------------------------------


class PodCalls(FakeCalls):
    def __init__(self, pod: dict[str, Any], claims: list[dict[str, Any]]) -> None:
        super().__init__()
        self.pod, self.claims = pod, claims

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.pod

    def get_node(self, name: str) -> dict[str, Any]:
        raise ClusterError(f"get node {name}: 403 forbidden", code=403)

    def list_resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.claims


def test_a_bound_dra_pod_is_scheduled_and_its_allocation_is_its_claim() -> None:
    from vslice.workload import Workload

    pod = dra_pod("team-d", "train", node="node-c", generated="train-gpu")
    held = claim(
        "team-d", "train-gpu", results=[result("node-c")], reserved=[("train", "uid-train")]
    )
    workload = Workload(PodCalls(pod, [held]), "Pod", "team-d", "train")  # type: ignore[arg-type]
    assert workload.wait(1, until="scheduled") is workload
    placement = workload.allocation
    assert placement is not None
    assert (placement.node, placement.gpu_uuids, placement.memory_mib, placement.cores) == (
        "node-c",
        ["GPU-c-0"],
        8192,
        30,
    )
    assert placement.grants[0].path == "dra"


def test_an_unbound_dra_pod_has_no_allocation_yet() -> None:
    from vslice.workload import Workload

    pod = dra_pod("team-d", "train", phase="Pending")
    workload = Workload(PodCalls(pod, []), "Pod", "team-d", "train")  # type: ignore[arg-type]
    assert workload.allocation is None
    with pytest.raises(Timeout, match="is not scheduled after 0s"):
        workload.wait(0, until="scheduled")


def test_documents_without_a_namespace_keep_none_for_the_client_to_place() -> None:
    from vslice import dra as sdk_dra

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
    tmpl = {"kind": "ResourceClaimTemplate", "metadata": {"name": "t"}, "spec": {}}
    _, found = sdk_dra.split_documents([tmpl, pod], "manifest")
    assert list(found) == [("ResourceClaimTemplate", "default", "t")]
    assert "namespace" not in found[("ResourceClaimTemplate", "default", "t")]["metadata"]
    pod["metadata"]["namespace"] = "team"
    _, found = sdk_dra.split_documents([tmpl, pod], "manifest")
    assert found[("ResourceClaimTemplate", "team", "t")]["metadata"]["namespace"] == "team"


def test_the_gpu_tables_mark_the_gpus_on_the_dra_path() -> None:
    from vslice import views
    from vslice.commands import top

    gpus = cluster().gpus()
    assert {row.path for row in gpus} == {"dra"}
    assert all(views.gpu_cells(row)[3].endswith(" (DRA)") for row in gpus)
    assert "(DRA)" in str(gpus) and "(DRA)" in gpus._repr_html_()
    assert "(DRA)" in top.render(gpus)
    extender = ClusterSnapshot.read(*_extender_objects()).gpus()
    assert {row.path for row in extender} == {"extender"} and "(DRA)" not in str(extender)


def _extender_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from api_objects import cluster_objects

    nodes, pods = cluster_objects()
    return nodes, pods
