"""The lab calls its extender over HTTPS with kube-scheduler's own client certificate."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from vslice_core.errors import InvalidRequest
from vslice_lab import configs
from vslice_lab.pki import KeyPair


def test_an_https_extender_is_called_with_the_schedulers_client_certificate(
    tmp_path: Path,
) -> None:
    tls = configs.ExtenderTls(tmp_path / "ca.crt", KeyPair(tmp_path / "s.crt", tmp_path / "s.key"))
    path = configs.write_scheduler_config(
        tmp_path / "s.yaml", tmp_path / "kubeconfig", "https://127.0.0.1:9999", tls=tls
    )
    (extender,) = yaml.safe_load(path.read_text())["extenders"]
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {
        "caFile": str(tmp_path / "ca.crt"),
        "certFile": str(tmp_path / "s.crt"),
        "keyFile": str(tmp_path / "s.key"),
    }


def test_a_plain_http_extender_gets_no_tls_configuration(tmp_path: Path) -> None:
    tls = configs.ExtenderTls(tmp_path / "ca.crt", KeyPair(tmp_path / "s.crt", tmp_path / "s.key"))
    path = configs.write_scheduler_config(
        tmp_path / "s.yaml", tmp_path / "kubeconfig", "http://127.0.0.1:9999", tls=tls
    )
    (extender,) = yaml.safe_load(path.read_text())["extenders"]
    assert extender["enableHTTPS"] is False and "tlsConfig" not in extender


def test_an_extra_extender_manages_its_own_resource_with_the_schedulers_tls(
    tmp_path: Path,
) -> None:
    tls = configs.ExtenderTls(tmp_path / "ca.crt", KeyPair(tmp_path / "s.crt", tmp_path / "s.key"))
    path = configs.write_scheduler_config(
        tmp_path / "s.yaml",
        tmp_path / "kubeconfig",
        None,
        tls=tls,
        extra=[configs.ExtraExtender("https://127.0.0.1:9998", "example.com/null-gpu")],
    )
    (extra,) = yaml.safe_load(path.read_text())["extenders"]
    assert extra["urlPrefix"] == "https://127.0.0.1:9998"
    assert extra["managedResources"] == [
        {"name": "example.com/null-gpu", "ignoredByScheduler": False}
    ]
    assert extra["bindVerb"] == "bind" and extra["nodeCacheCapable"] is True
    assert extra["enableHTTPS"] is True
    assert extra["tlsConfig"] == {
        "caFile": str(tmp_path / "ca.crt"),
        "certFile": str(tmp_path / "s.crt"),
        "keyFile": str(tmp_path / "s.key"),
    }


def test_a_second_binding_extender_beside_vslices_is_refused_naming_both(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as raised:
        configs.write_scheduler_config(
            tmp_path / "s.yaml",
            tmp_path / "kubeconfig",
            "https://127.0.0.1:9999",
            extra=[configs.ExtraExtender("https://127.0.0.1:9998", "example.com/null-gpu")],
        )
    assert raised.value.field == "extra_extenders"
    assert "127.0.0.1:9998" in str(raised.value) and "127.0.0.1:9999" in str(raised.value)
    assert not (tmp_path / "s.yaml").exists()
