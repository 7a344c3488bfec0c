"""The lab's certificates: one CA, serving certificates for loopback, client certificates.

All keys are ECDSA P-256 (fast to generate; kube-apiserver accepts them for TLS and for
service-account token signing). Files are PEM, written with mode 0600 for keys. Certificates
are valid for a year, which outlives any lab; ``lab up`` on an existing state dir reuses them
so kubeconfigs handed out earlier keep working.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """Paths of a certificate and its private key."""

    cert: Path
    key: Path


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    # kube-apiserver reads every O of a client certificate as one group of the user.
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    parts += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name(parts)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.write_bytes(pem)
    path.chmod(0o600)


def _load(pair: KeyPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pair.key} is not an EC private key")
    return cert, key


def _builder(
    subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def ensure_ca(directory: Path) -> KeyPair:
    """The lab CA under ``directory`` (created once)."""
    pair = KeyPair(directory / "ca.crt", directory / "ca.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("vslice-lab-ca")
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write_key(pair.key, key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def issue(
    ca: KeyPair,
    directory: Path,
    name: str,
    *,
    common_name: str,
    organization: str | None = None,
    groups: tuple[str, ...] = (),
    hosts: tuple[str, ...] = (),
    server: bool = False,
    client: bool = True,
) -> KeyPair:
    """A certificate signed by ``ca`` for client authentication, serving ``hosts``, or both.

    ``organization`` and then ``groups`` become the subject's O attributes, which the API
    server reads as the user's groups."""
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    subject = _name(common_name, (*filter(None, [organization]), *groups))
    ca_cert, ca_key = _load(ca)
    if _reusable(pair, ca_cert, usages, hosts, subject):
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    builder = _builder(subject, ca_cert.subject, key.public_key())
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(_alt_names(hosts)), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(pair.key, key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def _reusable(
    pair: KeyPair,
    ca: x509.Certificate,
    usages: list[x509.ObjectIdentifier],
    hosts: tuple[str, ...],
    subject: x509.Name,
) -> bool:
    """An existing certificate is kept only if it still fits: same CA, subject (so groups),
    usages and hosts, and more than a day left (a lab restarted with other settings gets
    fresh certificates)."""
    if not (pair.cert.exists() and pair.key.exists()):
        return False
    try:
        cert, _key = _load(pair)
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        sans = _san_values(cert)
    except (ValueError, x509.ExtensionNotFound):
        return False
    fresh = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > datetime.timedelta(
        days=1
    )
    return (
        cert.issuer == ca.subject
        and cert.subject == subject
        and fresh
        and list(eku) == usages
        and sans == {str(n.value) for n in _alt_names(hosts)}
    )


def _san_values(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(name.value) for name in san}


def _alt_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def ensure_signing_key(directory: Path) -> KeyPair:
    """The service-account token signing key (``cert`` holds its public key)."""
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    _write_key(pair.key, key)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pair.cert.write_bytes(public)
    return pair


def ensure_allocation_keys(directory: Path) -> Path:
    """The lab's allocation proof key file (``vslice_core.proof``), created once: the extender
    signs with it, the real nodes' device plugins verify with it. Readable by root only."""
    path = directory / "allocation.keys"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(
            f"# vslice allocation proof keys: <key id> <hex key>\nlab-1 {secrets.token_hex(32)}\n"
        )
        partial.chmod(0o600)
        partial.replace(path)
    return path
