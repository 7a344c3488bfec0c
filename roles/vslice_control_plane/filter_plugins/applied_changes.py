"""What an apply of vslice's manifests changed in fields vslice writes.

kubernetes.core.k8s calls an apply "changed" when the object it reads just before differs in
anything from the object the apply returns. Kubernetes itself writes into some of vslice's
objects at times of its own: the token controller fills a token Secret's ``data``, the API
server stamps ``kubernetes.io/legacy-token-last-used`` on it once a day when the token is
used, the policy controller writes a ValidatingAdmissionPolicy's ``status``. When one of those
writes lands between the module's read and its apply, the role would report a change it did
not make, and a second run would not look idempotent. The role therefore asks for the
module's diff and counts only differences in fields vslice's manifests set; the rest is
named under ``ignored`` for whoever reads the log.

Standard library only: Ansible loads this file on the controller.
"""

from __future__ import annotations

from typing import Any

# Written by Kubernetes, never by vslice's manifests.
_METADATA_BY_SERVER = frozenset({"resourceVersion", "generation", "managedFields", "uid"})
_SERVER_LABEL_PREFIX = "kubernetes.io/"  # vslice's manifests set no label of that prefix
_SECRET_DATA_KINDS = frozenset({"Secret"})  # the token controller's data


def _documents(item: dict[str, Any]) -> list[dict[str, Any]]:
    """One loop item's per-object results: a file of several objects nests them."""
    if "method" in item:
        return [item]
    nested = item.get("result")
    if isinstance(nested, dict) and isinstance(nested.get("results"), list):
        return [doc for doc in nested["results"] if isinstance(doc, dict)]
    return []


def _paths(before: Any, after: Any, prefix: str) -> list[str]:
    """The dotted paths where the two diff halves differ (a half lacks a key: it differs)."""
    if isinstance(before, dict) and isinstance(after, dict):
        paths: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            paths.extend(_paths(before.get(key), after.get(key), f"{prefix}{key}."))
        return paths
    return [] if before == after else [prefix.rstrip(".")]


def _by_server(kind: str, path: str) -> bool:
    top, _, rest = path.partition(".")
    if top == "status":
        return True
    if top == "data" and kind in _SECRET_DATA_KINDS:
        return True
    if top == "metadata":
        field, _, key = rest.partition(".")
        if field in _METADATA_BY_SERVER:
            return True
        if field == "labels" and key.startswith(_SERVER_LABEL_PREFIX):
            return True
    return False


def _name(doc: dict[str, Any]) -> str:
    found = doc.get("result")
    obj: dict[str, Any] = found if isinstance(found, dict) else {}
    meta: dict[str, Any] = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind', '?')} {where}{meta.get('name', '?')}"


def applied_changes(item: dict[str, Any]) -> dict[str, list[str]]:
    """``changed``: "Kind name: path, ..." per object vslice's apply changed (or created);
    ``ignored``: the same for differences only Kubernetes wrote."""
    changed: list[str] = []
    ignored: list[str] = []
    for doc in _documents(item):
        if doc.get("method") == "create":
            changed.append(f"{_name(doc)}: created")
            continue
        if not doc.get("changed"):
            continue
        diff = doc.get("diff") or {}
        if "kind" in (diff.get("after") or {}) and "kind" not in (diff.get("before") or {}):
            # Server-side apply creates with method "apply": the diff is the whole object.
            changed.append(f"{_name(doc)}: created")
            continue
        kind = str((doc.get("result") or {}).get("kind", ""))
        paths = _paths(diff.get("before", {}), diff.get("after", {}), "")
        ours = [p for p in paths if not _by_server(kind, p)]
        theirs = [p for p in paths if _by_server(kind, p)]
        if ours or not paths:
            # No diff at all for a change: the module could not say, so it counts.
            changed.append(f"{_name(doc)}: {', '.join(ours) or 'changed'}")
        else:
            ignored.append(f"{_name(doc)}: {', '.join(theirs)}")
    return {"changed": changed, "ignored": ignored}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"vslice_applied_changes": applied_changes}
