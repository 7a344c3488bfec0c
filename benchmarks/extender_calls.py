"""The extender's filter round trip over HTTPS, as kube-scheduler makes it (no cluster needed).

kube-scheduler schedules one pod at a time and waits for the extender's filter answer inside
its scheduling cycle, so the filter's round trip, not its CPU alone, bounds pods per second
on the extender path (docs/performance.md, "Where the extender path's time goes"). This
benchmark isolates that round trip: the extender's own routes on the shared HTTP server
(``vslice_serving.httpserve``) with TLS and client-certificate checks as in production, a
ledger of N nodes x 8 GPUs fed through the same watch handlers, and one keep-alive HTTPS
client posting ``ExtenderArgs`` shaped like kube-scheduler's: a whole Pod as the API server
returns it (a projected service-account volume, tolerations, the webhook's annotations) and
the candidate names (``--candidates``; by default as many as kube-scheduler sends: 420 of
1,000 nodes, 500 of 5,000).

Each pod is filtered once (the extender holds its slice), so the ledger fills as it would in a
burst. No bind follows, so the holds stay; the extender's sweep passes over the holds older
than its grace (5 s) on every filter, so a run is kept to a few seconds (2,000 calls take
about one). The client runs in another process, so that the server's interpreter is not
shared with it, as kube-scheduler's is not.

Printed per run: round-trip p50/p99 (the client's clock), the server's CPU per call and, for
comparison, the filter handler's own time (the extender's ``filter_seconds`` histogram mean).

Run: ``.venv/bin/python benchmarks/extender_calls.py [--nodes 1000] [--calls 2000]``.
The last line is
``extender_calls nodes=<n> candidates=<c> calls=<k> p50_ms=<a> p99_ms=<b> server_cpu_ms=<c>
handler_ms=<d>``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from extender_state import node_item
from vslice_control.extender.feed import NodeFeed, PodFeed
from vslice_control.extender.holds import Holds
from vslice_control.extender.main import VERBS, routes
from vslice_control.extender.metrics import ExtenderMetrics
from vslice_control.extender.verbs import Extender
from vslice_core.ledger import Ledger
from vslice_core.resources import DEFAULT_RESOURCE_NAMES
from vslice_lab.pki import KeyPair, ensure_ca, issue
from vslice_serving.httpserve import ClientAuth, HttpService, ReloadingTlsContext

SCHEDULER_CN = "vslice-scheduler-client"


def scheduler_pod(index: int) -> dict[str, Any]:
    """A pending vslice pod as kube-scheduler has it from the API server."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "5"}
    return {
        "metadata": {
            "name": f"bench-{index:06d}",
            "namespace": "bench",
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(200000 + index),
            "creationTimestamp": "2026-12-05T10:00:00Z",
            "labels": {"app": "bench"},
            "annotations": {
                "vslice.io/normalized": "true",
                "vslice.io/request": '{"containers":[{"name":"main","gpus":1,"memory_mib":1024,'
                '"cores":5}]}',
            },
        },
        "spec": {
            "volumes": [
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/notebook:1",
                    "resources": {"limits": limits, "requests": limits},
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x7k2p",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def candidates_sent(nodes: int) -> int:
    """How many feasible nodes kube-scheduler looks for, and so sends, by default
    (``numFeasibleNodesToFind``: 50 % less 1 % per 125 nodes, at least 5 % and 100 nodes)."""
    if nodes < 100:
        return nodes
    return max(100, nodes * max(5, 50 - nodes // 125) // 100)


def _pki(directory: Path) -> tuple[KeyPair, KeyPair, KeyPair]:
    ca = ensure_ca(directory)
    server = issue(
        ca, directory, "extender", common_name="extender", hosts=("127.0.0.1",), server=True
    )
    client = issue(ca, directory, "scheduler", common_name=SCHEDULER_CN, hosts=(), server=False)
    return ca, server, client


def _client(
    port: int, ca: KeyPair, client: KeyPair, bodies: list[bytes], out: Any
) -> None:  # runs in a child process
    context = ssl.create_default_context(cafile=str(ca.cert))
    context.load_cert_chain(str(client.cert), str(client.key))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    times: list[float] = []
    fitted = 0
    for body in bodies:
        began = time.perf_counter()
        conn.request("POST", "/filter", body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        times.append(time.perf_counter() - began)
        fitted += bool(reply.status == 200 and json.loads(data).get("NodeNames"))
    conn.close()
    out.send((times, fitted))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument(
        "--candidates", type=int, default=0, help="names per call (0: as kube-scheduler sends)"
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    candidates = min(args.candidates or candidates_sent(args.nodes), args.nodes)

    ledger = Ledger()
    holds = Holds(ttl_seconds=3600)
    metrics = ExtenderMetrics(ledger)
    pods = PodFeed(ledger, holds)
    extender = Extender(ledger, holds, None, metrics, names=DEFAULT_RESOURCE_NAMES, pods=pods)
    nodes = NodeFeed(ledger)
    nodes.replace([node_item(i) for i in range(args.nodes)])
    pods.replace([])
    names = [f"node-{i:05d}" for i in range(args.nodes)]

    total = args.warmup + args.calls
    pod_objects = [scheduler_pod(i) for i in range(total)]
    for pod in pod_objects:  # the watch has seen them (ADDED) before they are filtered
        pods.apply("ADDED", pod)
    bodies = [
        json.dumps(
            {"Pod": pod, "Nodes": None, "NodeNames": names[i % 7 :][:candidates]},
            separators=(",", ":"),
        ).encode()
        for i, pod in enumerate(pod_objects)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ca, server, client = _pki(Path(tmp))
        tls = ReloadingTlsContext(str(server.cert), str(server.key), str(ca.cert))
        auth = ClientAuth(frozenset({SCHEDULER_CN}), VERBS)
        service = HttpService(
            ("127.0.0.1", 0), routes(extender, metrics, lambda: True), tls=tls, client_auth=auth
        )
        service.start()
        try:
            ctx = multiprocessing.get_context("fork")
            receiver, sender = ctx.Pipe(duplex=False)
            warm = ctx.Process(
                target=_client, args=(service.port, ca, client, bodies[: args.warmup], sender)
            )
            warm.start()
            receiver.recv()
            warm.join()
            cpu0, filter0 = time.process_time(), _filter_sum(metrics)
            child = ctx.Process(
                target=_client, args=(service.port, ca, client, bodies[args.warmup :], sender)
            )
            child.start()
            times, fitted = receiver.recv()
            child.join()
            cpu = time.process_time() - cpu0
            handler_s = _filter_sum(metrics) - filter0
        finally:
            service.stop()
    times_ms = sorted(t * 1000 for t in times)
    p50 = statistics.median(times_ms)
    p99 = times_ms[int(len(times_ms) * 0.99) - 1]
    load = os.getloadavg()[0]
    print(
        f"{args.calls} filter calls, {args.nodes} nodes, {candidates} candidates a call, "
        f"{fitted} fitted, load {load:.2f}",
        file=sys.stderr,
    )
    print(
        f"extender_calls nodes={args.nodes} candidates={candidates} calls={args.calls} "
        f"p50_ms={p50:.3f} p99_ms={p99:.3f} server_cpu_ms={cpu * 1000 / args.calls:.3f} "
        f"handler_ms={handler_s * 1000 / args.calls:.3f}"
    )
    return 0 if fitted == args.calls else 1


def _filter_sum(metrics: ExtenderMetrics) -> float:
    for family in metrics.filter_seconds.collect():
        for sample in family.samples:
            if sample.name.endswith("_sum"):
                return float(sample.value)
    return 0.0


if __name__ == "__main__":
    sys.exit(main())
