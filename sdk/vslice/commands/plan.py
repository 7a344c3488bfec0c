"""``vslice plan CLUSTER POD [--json] [--from-dump]``: would this pod fit, where, and why not.

A DRA pod (its ``spec.resourceClaims`` name claims of vslice's device class) is planned with
the same engine, its request read from the claim or template: POD may hold them beside the
pod (one YAML file, documents separated by ``---``), and a dump may hold ResourceClaims. The
answer then adds that kube-scheduler's DRA allocator places the pod and what the engine's
answer leaves out there (text: the last lines; ``--json``: a ``dra`` object). A dump that
holds ResourceSlices or ResourceClaims (``kubectl get nodes,pods,resourceslices,resourceclaims
-A -o yaml``) counts the DRA path's nodes and allocations too, as ``vslice top`` does.

The pod is refused exactly as admission refuses it: its vslice values go through the core's
one pass (``vslice_core.requests``: Kubernetes' quantity grammar with ASCII digits and no
blanks, the node side's bounds, ``requests`` equal to ``limits``), with the webhook's message,
on the DRA path too.

Exit status: 0 the pod fits, 1 it does not, 2 invalid input (one line on stderr naming the
field and the value, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vslice_core.cluster import Cluster, build_ledger, cluster_from_dump, load_yaml, parse_cluster
from vslice_core.errors import InvalidRequest, VsliceError, one_line
from vslice_core.model import Decision, PodRequest
from vslice_core.plan import plan_decision, plan_json, pod_manifest
from vslice_core.requests import normalize_gpu_pod
from vslice_core.whynot import render_plan

from vslice import dra
from vslice.snapshot import ClusterSnapshot

DRA_KINDS = ("ResourceSlice", "ResourceClaim")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cluster", metavar="CLUSTER", help="cluster YAML/JSON ('-' = stdin)")
    parser.add_argument("pod", metavar="POD", help="Pod manifest YAML/JSON ('-' = stdin)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--from-dump",
        action="store_true",
        help="CLUSTER is `kubectl get nodes,pods -A -o yaml` output (detected automatically)",
    )


def _read(path: str, what: str) -> str:
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise VsliceError(
            f"{what} must be a readable UTF-8 file, got {path!r} ({reason})"
        ) from None


def _is_dump(data: Any) -> bool:
    return isinstance(data, dict) and "items" in data and "nodes" not in data


def _cluster(data: Any, from_dump: bool) -> Cluster | ClusterSnapshot:
    """The CLUSTER file; a dump holding the DRA path's objects is read as the views read the
    live cluster (so its claims count), any other as before."""
    if not (from_dump or _is_dump(data)):
        return parse_cluster(data)
    items = data.get("items") if isinstance(data, dict) else None
    kinds = {item.get("kind") for item in items or [] if isinstance(item, dict)}
    if not kinds & set(DRA_KINDS):
        return cluster_from_dump(data)

    def of(kind: str) -> list[dict[str, Any]]:
        return [item for item in items or [] if isinstance(item, dict) and item.get("kind") == kind]

    return ClusterSnapshot.read(of("Node"), of("Pod"), of("ResourceSlice"), of("ResourceClaim"))


def _dump_claims(cluster: Cluster | ClusterSnapshot, data: Any) -> dra.Lookup | None:
    if not isinstance(cluster, ClusterSnapshot) or not isinstance(data, dict):
        return None
    found: dict[tuple[str, str, str], Any] = {}
    for item in data.get("items") or []:
        if isinstance(item, dict) and item.get("kind") in dra.CLAIM_KINDS:
            meta = item.get("metadata") or {}
            found[
                (item["kind"], str(meta.get("namespace") or "default"), str(meta.get("name")))
            ] = item
    return dra.chain(found)


def _decide(
    cluster: Cluster | ClusterSnapshot, manifest: Any, lookup: dra.Lookup
) -> tuple[Decision, PodRequest, list[str] | None]:
    """The decision, the request, and (DRA path only) the notes the answer adds."""
    pod = pod_manifest(manifest)
    found_meta = pod.get("metadata")
    metadata: dict[str, Any] = dict(found_meta) if isinstance(found_meta, dict) else {}
    namespaced = {
        **pod,
        "metadata": {**metadata, "namespace": metadata.get("namespace") or "default"},
    }
    found = dra.pod_request(namespaced, lookup)
    if found is None:
        if isinstance(cluster, Cluster):
            decision, request = plan_decision(cluster, manifest)
        else:
            request = plan_decision(Cluster(), manifest)[1]  # the same checks of the pod
            decision = cluster.decide(request, "extender")
        return decision, request, None
    # The claims carry the request, but admission still reads the pod's own vslice values.
    normalize_gpu_pod(namespaced)
    if found.missing:
        ref = found.missing[0]
        key = "resourceClaimName" if ref.kind == "ResourceClaim" else "resourceClaimTemplateName"
        raise InvalidRequest(
            f"{ref.field}.{key} names {ref.label(found.request.namespace)}, which is not in "
            f"POD or CLUSTER: put the {ref.kind} in the POD file beside the pod (documents "
            "separated by '---')",
            field=f"{ref.field}.{key}",
            value=ref.name,
        )
    request = found.request
    if isinstance(cluster, Cluster):
        nodes = [node.name for node in cluster.nodes]
        decision = build_ledger(cluster).decide(request, nodes, explain=True, suggest=True)
    else:
        decision = cluster.decide(request, "dra")
    return decision, request, dra.notes(namespaced, found.notes)


def run(args: argparse.Namespace) -> int:
    try:
        if args.cluster == "-" and args.pod == "-":
            # The first read would take all of stdin and leave POD empty.
            raise InvalidRequest(
                "CLUSTER and POD cannot both be '-' (stdin)", field="POD", value="-"
            )
        data = load_yaml(_read(args.cluster, "CLUSTER"), "CLUSTER")
        cluster = _cluster(data, args.from_dump)
        documents = dra.load_documents(_read(args.pod, "POD"), "POD")
        manifest, beside = dra.split_documents(documents, "POD")
        decision, request, notes = _decide(
            cluster, manifest, dra.chain(beside, _dump_claims(cluster, data))
        )
    except VsliceError as error:
        print(f"vslice plan: {one_line(error)}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, RecursionError, AttributeError) as error:
        # Input shapes no validator anticipated: still one line, never a traceback.
        message = f"input must be a valid cluster and pod, got {error}"
        print(f"vslice plan: {one_line(message)}", file=sys.stderr)
        return 2
    if isinstance(cluster, ClusterSnapshot):
        for problem in cluster.problems:
            print(f"vslice plan: warning: {one_line(problem)}", file=sys.stderr)
    if args.json:
        result = plan_json(decision, request)
        if notes is not None:
            result["dra"] = dra.plan_json(notes)
        print(json.dumps(result))
    else:
        text = render_plan(decision, request)
        if notes is not None:
            text += "\n" + "\n".join(dra.plan_lines(notes))
        print(text)
    return 0 if decision.fits else 1
