"""Where the SDK finds its cluster and namespace (documented in docs/sdk.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import vslice
import yaml
from vslice_kube.workloads import default_namespace, sdk_kubeconfig


def _kubeconfig(path: Path, namespace: str | None = None) -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": context}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("VSLICE_NAMESPACE", raising=False)
    (tmp_path / "home" / ".kube").mkdir(parents=True)
    return tmp_path / "home"


def test_an_explicit_kubeconfig_wins(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "env")))
    assert sdk_kubeconfig(tmp_path / "mine") == tmp_path / "mine"


def test_then_the_first_existing_file_of_kubeconfig(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kubeconfig(home / ".kube" / "config")
    second = _kubeconfig(tmp_path / "second")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{second}")
    assert sdk_kubeconfig() == second


def test_then_the_home_kubeconfig_then_the_in_cluster_account(home: Path) -> None:
    assert sdk_kubeconfig() is None  # nothing configured: in-cluster comes next
    _kubeconfig(home / ".kube" / "config")
    assert sdk_kubeconfig() == home / ".kube" / "config"


def test_nothing_configured_is_a_cluster_error_that_says_what_was_tried(home: Path) -> None:
    with pytest.raises(vslice.ClusterError, match=r"\$KUBECONFIG unset"):
        vslice.Client()


def test_a_kubeconfig_variable_naming_no_file_is_quoted_in_the_error(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = f"{tmp_path / 'gone'}:{tmp_path / 'also-gone'}"
    monkeypatch.setenv("KUBECONFIG", listed)
    with pytest.raises(
        vslice.ClusterError, match=re.escape(f"KUBECONFIG={listed!r} names no existing file")
    ):
        vslice.Client()


def test_the_namespace_comes_from_the_argument_the_environment_or_the_context(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _kubeconfig(tmp_path / "config", namespace="from-context")
    assert default_namespace(config) == "from-context"
    assert default_namespace(_kubeconfig(tmp_path / "plain")) == "default"
    assert vslice.Client(config).namespace == "from-context"
    monkeypatch.setenv("VSLICE_NAMESPACE", "from-env")
    assert vslice.Client(config).namespace == "from-env"
    assert vslice.Client(config, namespace="given").namespace == "given"


def test_an_unreadable_kubeconfig_is_a_cluster_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text("contexts: [")
    with pytest.raises(vslice.ClusterError, match="cannot be read"):
        default_namespace(broken)
    with pytest.raises(vslice.ClusterError, match="cannot be read"):
        vslice.Client(broken)
    with pytest.raises(vslice.ClusterError, match="does not exist"):
        vslice.Client(tmp_path / "missing")


def test_a_manifest_that_is_not_yaml_is_refused_before_any_cluster_call(tmp_path: Path) -> None:
    # The server in the kubeconfig listens nowhere: reaching it would be a ClusterError instead.
    client = vslice.Client(_kubeconfig(tmp_path / "config"))
    with pytest.raises(
        vslice.InvalidRequest, match=r"^manifest must be valid YAML or JSON, got .* at line 2$"
    ):
        client.submit("kind: Pod\nspec: {containers: [}\n")
