"""The lab's client certificates carry the groups the API server reads from them."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID
from vslice_lab.pki import ensure_ca, issue


def _organizations(path: Path) -> list[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def test_every_group_becomes_an_organization_of_the_subject(tmp_path: Path) -> None:
    ca = ensure_ca(tmp_path)
    pair = issue(
        ca,
        tmp_path,
        "services",
        common_name="vslice-services",
        organization="system:masters",
        groups=("vslice:services",),
    )
    assert _organizations(pair.cert) == ["system:masters", "vslice:services"]


def test_a_certificate_issued_with_other_groups_is_not_reused(tmp_path: Path) -> None:
    ca = ensure_ca(tmp_path)
    first = issue(ca, tmp_path, "services", common_name="svc", organization="system:masters")
    before = first.cert.read_bytes()
    assert issue(ca, tmp_path, "services", common_name="svc", organization="system:masters")
    assert first.cert.read_bytes() == before  # same subject: kept
    again = issue(ca, tmp_path, "services", common_name="svc", groups=("vslice:services",))
    assert _organizations(again.cert) == ["vslice:services"]
