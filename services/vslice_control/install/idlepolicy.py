"""The ValidatingAdmissionPolicy that refuses a malformed idle-reclaim setting when it is written.

The monitors read a namespace's opt-in from its labels and a pod's wish to be kept from an
annotation (:mod:`vslice_core.idle`, docs/idle.md). A monitor that met a bad value could only
log it on one node; this policy makes the API server refuse it at once, with a message that
names the object, the key and the value:

- namespace labels ``vslice.io/idle-reclaim`` and ``vslice.io/idle-grace``: a duration
  (``90s``, ``30m``, ``4h``, ``1h30m``, ``2d``) longer than zero;
- namespace label ``vslice.io/idle-keep``: ``allow`` or ``forbid``;
- pod annotation ``vslice.io/idle-keep``: ``true`` or ``false``, and ``true`` refused in a
  namespace labelled ``vslice.io/idle-keep=forbid``. Only a pod's own change is checked (a
  new pod, or the annotation set or changed): a namespace that forbids keeping later does
  not block every later update of the pods it already has; their annotation is then simply
  not honoured (the warning says so).
"""

from __future__ import annotations

from typing import Any

from vslice_core.idle import (
    DURATION_HINT,
    DURATION_PATTERN,
    GRACE_LABEL,
    KEEP_ALLOW,
    KEEP_ANNOTATION,
    KEEP_FORBID,
    KEEP_LABEL,
    KEEP_VALUES,
    RECLAIM_LABEL,
)

from vslice_control.install.statepolicy import admission_policy, binding, cel_list

POLICY_NAME = "vslice-idle-settings"

_LABELS = "(has(object.metadata.labels) ? object.metadata.labels : {})"
_NEW = "(has(object.metadata.annotations) ? object.metadata.annotations : {})"
_OLD = (
    "(oldObject != null && has(oldObject.metadata.annotations) ? "
    "oldObject.metadata.annotations : {})"
)
_NS_LABELS = (
    "(namespaceObject != null && has(namespaceObject.metadata.labels) ? "
    "namespaceObject.metadata.labels : {})"
)


def _duration_rule(label: str) -> dict[str, str]:
    value = f"variables.labels['{label}']"
    return {
        "expression": f"!variables.isNamespace || !('{label}' in variables.labels) || "
        f"({value}.matches('{DURATION_PATTERN}') && {value}.matches('[1-9]'))",
        "reason": "Invalid",
        "messageExpression": f"'namespace ' + object.metadata.name + ': label {label} ' + "
        f"{value} + ' is not a duration longer than 0; {DURATION_HINT}'",
    }


def policy() -> dict[str, Any]:
    keep = f"variables.new['{KEEP_ANNOTATION}']"
    return admission_policy(
        POLICY_NAME,
        {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["namespaces", "pods"],
                    }
                ]
            },
            "variables": [
                {"name": "isNamespace", "expression": "request.kind.kind == 'Namespace'"},
                {"name": "labels", "expression": _LABELS},
                {"name": "new", "expression": _NEW},
                {"name": "old", "expression": _OLD},
                {"name": "nsLabels", "expression": _NS_LABELS},
                {
                    "name": "keepChanged",
                    "expression": f"!variables.isNamespace && '{KEEP_ANNOTATION}' in variables.new "
                    f"&& (!('{KEEP_ANNOTATION}' in variables.old) || "
                    f"variables.old['{KEEP_ANNOTATION}'] != {keep})",
                },
            ],
            "validations": [
                _duration_rule(RECLAIM_LABEL),
                _duration_rule(GRACE_LABEL),
                {
                    "expression": f"!variables.isNamespace || !('{KEEP_LABEL}' in variables.labels)"
                    f" || variables.labels['{KEEP_LABEL}'] in "
                    f"{cel_list([KEEP_ALLOW, KEEP_FORBID])}",
                    "reason": "Invalid",
                    "messageExpression": f"'namespace ' + object.metadata.name + ': label "
                    f"{KEEP_LABEL} ' + variables.labels['{KEEP_LABEL}'] + ' is neither "
                    f"{KEEP_ALLOW} nor {KEEP_FORBID}'",
                },
                {
                    "expression": f"!variables.keepChanged || {keep} in {cel_list(KEEP_VALUES)}",
                    "reason": "Invalid",
                    "messageExpression": f"'pod ' + object.metadata.name + ': annotation "
                    f"{KEEP_ANNOTATION} ' + {keep} + ' is neither true nor false'",
                },
                {
                    "expression": f"!variables.keepChanged || {keep} != 'true' || "
                    f"!('{KEEP_LABEL}' in variables.nsLabels) || "
                    f"variables.nsLabels['{KEEP_LABEL}'] != '{KEEP_FORBID}'",
                    "reason": "Forbidden",
                    "messageExpression": f"'pod ' + object.metadata.name + ': annotation "
                    f"{KEEP_ANNOTATION}=true is not allowed in namespace ' + "
                    f"namespaceObject.metadata.name + ' (label {KEEP_LABEL}={KEEP_FORBID}): "
                    "its idle slices are given back; remove the annotation'",
                },
            ],
        },
    )


def objects(_values: object) -> list[dict[str, Any]]:
    """The policy, then its binding."""
    return [policy(), binding(POLICY_NAME)]
