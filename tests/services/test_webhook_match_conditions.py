"""Which pods the API server sends to the webhook (``matchConditions``): every pod the webhook
would change or refuse, and nothing the webhook leaves alone needs it.

``selected`` reads a pod the way the CEL expression of ``vslice_control.webhook.reach`` does;
the end-to-end test (tests/e2e/test_webhook_reach.py) checks the API server's own evaluation of
the expression against the same kinds of pods.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vslice_control.install import admission
from vslice_control.install.values import parse_values
from vslice_control.webhook.policy import WebhookPolicy, review_pod
from vslice_control.webhook.reach import VISIBLE_PREFIX, expression, match_conditions
from vslice_control.webhook.review import AdmissionRequest
from vslice_core.annotations import POD_STATE
from vslice_core.resources import DEFAULT_RESOURCE_NAMES, ResourceNames

NAMES = DEFAULT_RESOURCE_NAMES
VISIBLE = "NVIDIA_VISIBLE_DEVICES"


def selected(pod: Mapping[str, Any], names: ResourceNames = NAMES) -> bool:
    """The expression's meaning, in Python."""

    def asks(container: Mapping[str, Any]) -> bool:
        resources = container.get("resources") or {}
        keys = [*(resources.get("limits") or {}), *(resources.get("requests") or {})]
        return any(k in names.managed() or k.startswith(names.gpu) for k in keys)

    def sets_environment(container: Mapping[str, Any]) -> bool:
        env = container.get("env") or []
        prefixes = [e.get("prefix") or "" for e in container.get("envFrom") or []]
        return any(e.get("name") == VISIBLE for e in env) or any(
            p and (p.startswith(VISIBLE_PREFIX) or VISIBLE_PREFIX.startswith(p)) for p in prefixes
        )

    def uses_claims(container: Mapping[str, Any]) -> bool:
        return bool((container.get("resources") or {}).get("claims"))

    spec = pod["spec"]
    items = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    annotations = pod["metadata"].get("annotations") or {}
    shares_claims = not spec.get("shareProcessNamespace") and sum(map(uses_claims, items)) > 1
    return (
        any(asks(c) or sets_environment(c) for c in items)
        or any(k in POD_STATE for k in annotations)
        or shares_claims
    )


def review(pod: dict[str, Any], names: ResourceNames = NAMES) -> Any:
    request = AdmissionRequest(uid="u", operation="CREATE", namespace="ns", name="p", pod=pod)
    return review_pod(request, WebhookPolicy(names=names, hide_gpus_from_other_containers=True))


def acts(pod: dict[str, Any], names: ResourceNames = NAMES) -> bool:
    verdict = review(pod, names)
    return not verdict.allowed or bool(verdict.patch) or bool(verdict.warnings)


def _pod(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, **meta: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", **meta}, "spec": spec}


def _container(**fields: Any) -> dict[str, Any]:
    return {"name": fields.pop("name", "main"), "image": "busybox", **fields}


def _claim_sharing_pod() -> dict[str, Any]:
    """Two containers on one claim, in separate pid namespaces: refused (claimsharing)."""
    pod = _pod(
        _container(resources={"claims": [{"name": "gpu"}]}),
        _container(name="side", resources={"claims": [{"name": "gpu"}]}),
    )
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    return pod


_resource_keys = st.sampled_from(
    ["cpu", "memory", "example.com/fpga", NAMES.priority, *NAMES.managed(), "nvidia.com/gpumemory"]
)
_env = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["PATH", VISIBLE, "CUDA_DEVICE_SM_LIMIT", "VSLICE_LOG_LEVEL"]),
        "value": st.sampled_from(["all", "none", "void", "0", ""]),
    }
)
_env_from = st.fixed_dictionaries(
    {"configMapRef": st.just({"name": "settings"})},
    optional={"prefix": st.sampled_from(["", "APP_", "N", "NVI", "NVIDIA_VISIBLE_", "CUDA_"])},
)


@st.composite
def _containers(draw: st.DrawFn, name: str) -> dict[str, Any]:
    container: dict[str, Any] = _container(name=name)
    limits = draw(st.dictionaries(_resource_keys, st.sampled_from(["1", "2"]), max_size=3))
    if limits:
        key = draw(st.sampled_from(["limits", "requests", "both"]))
        container["resources"] = (
            {"limits": limits, "requests": dict(limits)} if key == "both" else {key: limits}
        )
    elif draw(st.booleans()):
        container["resources"] = {}
    if draw(st.booleans()):
        container["env"] = draw(st.lists(_env, max_size=2))
    if draw(st.booleans()):
        container["envFrom"] = draw(st.lists(_env_from, max_size=2))
    if draw(st.booleans()):
        container["securityContext"] = {"privileged": True}
    if draw(st.booleans()):
        claims = draw(st.lists(st.sampled_from(["gpu", "other"]), min_size=1, max_size=2))
        container.setdefault("resources", {})["claims"] = [{"name": c} for c in claims]
    return container


@st.composite
def _pods(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 2))
    containers = [draw(_containers(f"c{i}")) for i in range(count)]
    init = [draw(_containers(f"i{i}")) for i in range(draw(st.integers(0, 2)))]
    pod = _pod(*containers, init=init or None)
    keys = st.sampled_from([*POD_STATE, "vslice.io/gpu-type", "example.com/note"])
    annotations = draw(st.dictionaries(keys, st.just("x"), max_size=2))
    if annotations:
        pod["metadata"]["annotations"] = annotations
    if draw(st.booleans()):
        pod["spec"]["nodeName"] = "node-1"
    if draw(st.booleans()):
        pod["spec"]["shareProcessNamespace"] = True
    if any((c.get("resources") or {}).get("claims") for c in [*containers, *init]):
        pod["spec"]["resourceClaims"] = [
            {"name": "gpu", "resourceClaimName": "shared"},
            {"name": "other", "resourceClaimName": "other"},
        ]
    return pod


@settings(max_examples=400, deadline=None)
@given(_pods())
def test_a_pod_the_conditions_leave_out_is_one_the_webhook_would_not_touch(
    pod: dict[str, Any],
) -> None:
    if not selected(pod):
        verdict = review(pod)
        assert verdict.allowed and not verdict.patch and not verdict.warnings, verdict


@pytest.mark.parametrize(
    "pod",
    [
        _pod(_container(resources={"limits": {NAMES.gpu: "1"}})),
        _pod(_container(resources={"requests": {NAMES.memory: "1024"}})),
        _pod(_container(), init=[_container(name="i", resources={"limits": {NAMES.cores: "30"}})]),
        _pod(_container(resources={"limits": {"nvidia.com/gpumemory": "1"}})),
        _pod(_container(env=[{"name": VISIBLE, "value": "all"}])),
        _pod(_container(envFrom=[{"prefix": "NVIDIA_VISIBLE_", "configMapRef": {"name": "x"}}])),
        _pod(_container(), annotations={POD_STATE[0]: "{}"}),
        _claim_sharing_pod(),
    ],
    ids=[
        "gpu",
        "memory-request",
        "init-cores",
        "look-alike",
        "env",
        "env-from",
        "state",
        "claim-shared-by-containers",
    ],
)
def test_each_thing_the_webhook_acts_on_is_selected(pod: dict[str, Any]) -> None:
    assert acts(pod) and selected(pod)


def test_a_cpu_pod_is_left_out() -> None:
    pod = _pod(
        _container(resources={"limits": {"cpu": "1", "memory": "1Gi"}}, env=[{"name": "A"}]),
        init=[_container(name="i")],
        annotations={"vslice.io/gpu-type": "A100"},
    )
    assert not selected(pod) and not acts(pod)


@pytest.mark.parametrize(
    "names",
    [NAMES, ResourceNames(gpu="example.com/gpu", memory="example.com/vram", cores="x.io/sm")],
    ids=["defaults", "renamed"],
)
def test_the_expression_names_each_configured_resource_and_guards_every_optional_field(
    names: ResourceNames,
) -> None:
    text = expression(names)
    for resource in names.managed():
        assert f"'{resource}'" in text
    assert f"k.startsWith('{names.gpu}')" in text
    for key in POD_STATE:
        assert f"'{key}'" in text
    assert f"'{VISIBLE}'" in text
    for field in (
        "object.spec.initContainers",
        "object.metadata.annotations",
        "c.resources",
        "c.resources.limits",
        "c.resources.requests",
        "c.env",
        "c.envFrom",
        "e.prefix",
    ):
        assert f"has({field})" in text, field
    assert text.count("(") == text.count(")")


def test_the_installed_configuration_carries_the_conditions_for_its_names_and_fails_closed() -> (
    None
):
    names = ResourceNames(gpu="example.com/gpu")
    values = parse_values({"resources": {"gpu": names.gpu}, "webhook": {"url": "https://x/m"}})
    (hook,) = admission.pod_configuration(values)["webhooks"]
    assert hook["matchConditions"] == match_conditions(names)
    assert len(hook["matchConditions"]) <= 64
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"][0]["operations"] == ["CREATE"]
    assert hook["name"].startswith("gpu-pods.")
