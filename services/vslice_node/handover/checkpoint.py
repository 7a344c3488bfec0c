"""The plugin's record of prepared claims, on disk, so a restarted plugin answers the
kubelet's repeated NodePrepareResources with the same devices and can still unprepare a claim
that was prepared before the restart (the claim object may be gone by then).

One JSON file, replaced atomically (temporary file in the same directory, then rename): a
crash leaves the old record or the new one. A record that cannot be read is moved aside
(``.corrupt``) and logged, and the plugin starts empty: the kubelet prepares its claims again.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vslice_core.model import GpuGrant

log = logging.getLogger("vslice.draplugin")

VERSION = 1


@dataclass(frozen=True)
class PreparedClaim:
    """What the plugin did for one claim: per request the grants, and the files it wrote."""

    namespace: str
    name: str
    grants: dict[str, list[GpuGrant]]
    spec_file: str
    share_ids: dict[str, list[str | None]] = field(default_factory=dict)
    """Per request, the allocation's share ID of each grant (same order), for the kubelet."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["grants"] = {
            request: [grant.model_dump() for grant in grants]
            for request, grants in self.grants.items()
        }
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreparedClaim:
        return cls(
            namespace=str(data["namespace"]),
            name=str(data["name"]),
            grants={
                str(request): [GpuGrant.model_validate(grant) for grant in grants]
                for request, grants in dict(data["grants"]).items()
            },
            spec_file=str(data["spec_file"]),
            share_ids={
                str(request): [None if i is None else str(i) for i in ids]
                for request, ids in dict(data.get("share_ids") or {}).items()
            },
        )


def prepared_claims(path: Path) -> dict[str, tuple[str, str]]:
    """Claim UID -> (namespace, claim name) of the claims a checkpoint holds, for a reader in
    another process (the monitor names DRA regions with it). Read only: a missing or
    unreadable file is no claims (the plugin, its only writer, deals with it)."""
    try:
        data = json.loads(path.read_text())
        return {
            str(uid): (str(claim["namespace"]), str(claim["name"]))
            for uid, claim in dict(data["claims"]).items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


class Checkpoint:
    """Prepared claims by UID; thread-safe, written through on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, this plugin reads {VERSION}")
            return {
                str(uid): PreparedClaim.from_json(claim) for uid, claim in data["claims"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            aside = self.path.with_suffix(".corrupt")
            os.replace(self.path, aside)
            log.error(
                "checkpoint unreadable, moved aside; claims will be prepared again",
                extra={"path": str(self.path), "moved_to": str(aside), "error": str(error)},
            )
            return {}

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._claims.get(uid)

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._claims)

    def items(self) -> list[tuple[str, PreparedClaim]]:
        with self._lock:
            return sorted(self._claims.items())

    def put(self, uid: str, claim: PreparedClaim) -> None:
        with self._lock:
            self._claims[uid] = claim
            self._write()

    def drop(self, uid: str) -> None:
        with self._lock:
            if self._claims.pop(uid, None) is not None:
                self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "version": VERSION,
            "claims": {uid: claim.to_json() for uid, claim in sorted(self._claims.items())},
        }
        fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".checkpoint-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(data, out, indent=1, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
