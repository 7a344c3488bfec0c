"""In-memory stand-ins for the API server's ResourceClaims and ResourceSlices, as the DRA
driver's node side reads and writes them (with resourceVersion checks)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from vslice_core.dra import DRIVER
from vslice_core.errors import ClusterError
from vslice_node.dra.claims import ClaimRef

NODE = "node-a"
REF = ClaimRef(namespace="team", uid="claim-uid-1", name="train-gpu")


class Claims:
    """The API server's claims, as the preparer reads them."""

    def __init__(self, *claims: dict[str, Any]) -> None:
        self.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        self.reads = 0
        self.fail: ClusterError | None = None

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads += 1
        if self.fail is not None:
            raise self.fail
        return self.claims.get((namespace, name))


class Slices:
    """The API server's ResourceSlices, with resourceVersion checks."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.writes = 0
        self.fail: ClusterError | None = None

    def resource_slice(self, name: str) -> Mapping[str, Any] | None:
        if self.fail is not None:
            raise self.fail
        found = self.stored.get(name)
        return copy.deepcopy(found) if found else None

    def put_resource_slice(self, body: Mapping[str, Any], resource_version: str | None) -> None:
        name = body["metadata"]["name"]
        current = self.stored.get(name)
        if (current is None) != (resource_version is None) or (
            current and current["metadata"]["resourceVersion"] != resource_version
        ):
            raise ClusterError("conflict", code=409)
        self.writes += 1
        stored = copy.deepcopy(dict(body))
        stored["metadata"]["resourceVersion"] = str(self.writes)
        self.stored[name] = stored

    def node_uid(self, name: str) -> str | None:
        return "node-uid"


def allocated_claim(
    ref: ClaimRef = REF, device: str = "gpu-1", node: str = NODE, **consumed: str
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "main",
                            "driver": DRIVER,
                            "pool": node,
                            "device": device,
                            "consumedCapacity": consumed or {"memory": "4Gi", "cores": "25"},
                            "shareID": "share-1",
                        }
                    ]
                }
            }
        },
    }
