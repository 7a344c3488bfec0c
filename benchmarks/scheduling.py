"""Pods per second through the real kube-scheduler: plain, with the vslice extender, with a
null extender, and through kube-scheduler's own DRA allocator with vslice's ResourceSlices.

For each cluster size a fresh lab is started (``vslice_lab``, the code of ``vslice lab up``)
with N simulated nodes of 8 GPUs x 10 slots each on the extender path and 8 more on the DRA
path (``dra_gpus``: the lab publishes them in a ResourceSlice per node, 8 devices with
consumable capacity). Every node also advertises a plain extended resource,
``example.com/plain-gpu: 80``, which the extender does not manage. The lab's
extender runs with leader election (one replica holding the Lease: a bind is one API write,
no node lock); ``--node-locks`` measures the node-lock mode instead.

Throughput: kube-scheduler is paused (SIGSTOP), P pods are created (through the webhook
when it runs), the scheduler is resumed (SIGCONT) and the clock runs until the last pod is
bound, as seen on a watch. So creation speed of this script does not count, only scheduling:

- plain:    pods asking ``example.com/plain-gpu: 1``, scheduled by kube-scheduler alone;
- extender: pods asking ``nvidia.com/gpu: 1, nvidia.com/gpumem: 1024, nvidia.com/gpucores: 5``,
            sent to the vslice extender (filter, then bind with the allocation annotation);
- null:     pods asking ``example.com/null-gpu: 1`` (advertised by every node, like the plain
            one), sent to ``benchmarks/nullextender`` (Go, standard library only, built here on
            the first run): its filter keeps the first candidate, its bind posts a plain
            Binding. It does no work of its own, so its pods per second is what the extender
            protocol itself allows on this machine (kube-scheduler encoding each pod and its
            candidates, two HTTPS calls, the Binding from another client) and ``null_ratio``
            the ceiling of any extender's ratio; ``of_null`` is the vslice extender's ratio as
            a share of it. kube-scheduler takes only one extender that binds, so this runs in
            a second lab per size, without the vslice services, and plain is measured again
            there (``plain2``; ``null_ratio`` = null / plain2). Without ``go`` (or with
            ``--no-null``) the column reads n/a;
- dra:      pods with a claim from one ResourceClaimTemplate asking the same slice (1 GPU,
            ``capacity.requests: {memory: 1024Mi, cores: 5}``), allocated by kube-scheduler's
            DRA plugin (Kubernetes 1.36). The controller manager makes each pod's claim while
            the scheduler is paused; the clock starts once every claim exists, so the column
            measures scheduling (allocation + bind), as the others do.

Before each throughput run the script waits for the lab to be quiet (under 0.15 cores busy,
at most 2 min: a lab just started keeps a core busy while thousands of kwok nodes report in),
and measures what each process spends idle; the CPU lines then show each process's
milliseconds per pod as measured and less that idle background over the run's length.

Latency: with the scheduler running, L pods are created at a steady rate (``--rate``, well
below either path's throughput) and each pod's time from its creation (the create call's
return) to its bind (the watch event) is taken; p50 and p99 are printed for both paths.

Run: ``.venv/bin/python benchmarks/scheduling.py [--sizes 100 1000] [--pods 500]``.
The last lines read
``scheduling nodes=<n> plain_pods_per_s=<x> extender_pods_per_s=<y> dra_pods_per_s=<z>
null_pods_per_s=<u> ratio=<y/x> dra_ratio=<z/x> null_ratio=<u/plain2> of_null=<ratio/null_ratio>
plain_p50_ms=<a> plain_p99_ms=<b> extender_p50_ms=<c> extender_p99_ms=<d> dra_p50_ms=<e>
dra_p99_ms=<f> null_p50_ms=<g> null_p99_ms=<h>`` (the DRA latency includes the controller
manager making the pod's claim).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import watch
from vslice_build import binaries as binaries_module
from vslice_build.versions import KUBERNETES_VERSION
from vslice_kube.client import api_client
from vslice_lab import lab as lab_module
from vslice_lab.configs import ExtraExtender
from vslice_lab.dra import supported as dra_supported
from vslice_lab.layout import Layout
from vslice_lab.ports import HOST, free_ports

PLAIN = "example.com/plain-gpu"
NULL = "example.com/null-gpu"
NULL_SOURCE = Path(__file__).resolve().parent / "nullextender"
GPUS_PER_NODE = 8
SLOTS_PER_GPU = 10


DRA_TEMPLATE = "bench-slice"


def inventory(nodes: int, dra: bool) -> dict[str, Any]:
    gpus = GPUS_PER_NODE * (2 if dra else 1)
    return {
        "nodes": [
            {
                "name": f"bench-{n:04d}",
                "gpus": [
                    {
                        "uuid": f"GPU-bench-{n:04d}-{g}",
                        "model": "NVIDIA-A100-SXM4-80GB",
                        "memory_mib": 81920,
                        "slots": SLOTS_PER_GPU,
                        "numa": (g % GPUS_PER_NODE) // 4,
                    }
                    for g in range(gpus)
                ],
                **({"dra_gpus": list(range(GPUS_PER_NODE, gpus))} if dra else {}),
            }
            for n in range(nodes)
        ]
    }


def pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/sleep:1"}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if limits == DRA:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": DRA_TEMPLATE}]
    else:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


DRA: dict[str, str] = {"dra": "claim"}
"""Marker ``limits`` of a DRA pod (its slice is in the template, not in limits)."""


def dra_template(api: k8s.ApiClient, namespace: str) -> None:
    """The template every DRA pod's claim is made from: the extender pods' slice."""
    from vslice_core.dra.claims import claim_spec
    from vslice_core.model import ContainerRequest, PodRequest

    spec = claim_spec(
        PodRequest(containers=[ContainerRequest(name="main", gpus=1, memory_mib=1024, cores=5)])
    )
    body: Any = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": DRA_TEMPLATE},
        "spec": {"spec": spec},
    }
    k8s.ResourceV1Api(api).create_namespaced_resource_claim_template(
        namespace, body, _preload_content=False
    )


def wait_claims(api: k8s.ApiClient, namespace: str, count: int) -> None:
    """Until the controller manager has made every pod's claim."""
    resource = k8s.ResourceV1Api(api)
    deadline = time.monotonic() + 600
    while True:
        listed = resource.list_namespaced_resource_claim(namespace, limit=1)
        remaining = listed.metadata.remaining_item_count or 0
        if len(listed.items) + remaining >= count:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(listed.items) + remaining} of {count} claims in 600 s")
        time.sleep(0.2)


class BindWatch:
    """Records when each pod of a namespace got a node, from a watch started before the pods
    exist."""

    def __init__(self, core: k8s.CoreV1Api, namespace: str, expected: int) -> None:
        self.expected = expected
        self.bound: dict[str, float] = {}
        self.done = threading.Event()
        self.last_bind = 0.0
        self._core = core
        self._namespace = namespace
        self._watch = watch.Watch()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        resource_version = ""
        while not self.done.is_set():
            try:
                resource_version = self._stream(resource_version)
            except Exception as error:  # a dropped watch: start again from a fresh list
                print(f"  (watch restarted: {error})", flush=True)
                resource_version = ""

    def _stream(self, resource_version: str) -> str:
        if not resource_version:
            listed = self._core.list_namespaced_pod(self._namespace)
            for item in listed.items:
                self._saw(item.metadata.name, item.spec.node_name)
            resource_version = listed.metadata.resource_version
        stream = self._watch.stream(
            self._core.list_namespaced_pod,
            self._namespace,
            resource_version=resource_version,
            timeout_seconds=60,
        )
        for event in stream:
            obj = event["object"]
            if event["type"] == "ERROR" or isinstance(obj, dict):
                return ""
            resource_version = obj.metadata.resource_version
            self._saw(obj.metadata.name, obj.spec.node_name)
            if self.done.is_set():
                self._watch.stop()
        return resource_version

    def _saw(self, name: str, node: str | None) -> None:
        if node and name not in self.bound:
            self.last_bind = self.bound[name] = time.monotonic()
            if len(self.bound) >= self.expected:
                self.done.set()


def _namespace(core: k8s.CoreV1Api, namespace: str) -> None:
    core.create_namespace({"metadata": {"name": namespace}})
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except k8s.ApiException:
            time.sleep(0.1)


def build_null_extender() -> tuple[Path | None, str]:
    """The null extender's binary, built from ``benchmarks/nullextender`` into the cache when
    its source changed (Go standard library only, so no module is fetched); or None and why."""
    go = binaries_module.find_go()
    if go is None:
        return None, "no Go toolchain on PATH (install Go >= 1.22 or run .ci/setup)"
    out = binaries_module.cache_root().parent / "bench" / "nullextender"
    sources = [*sorted(NULL_SOURCE.glob("*.go")), NULL_SOURCE / "go.mod"]
    if out.exists() and all(out.stat().st_mtime >= f.stat().st_mtime for f in sources):
        return out, ""
    out.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run(
        [go, "build", "-trimpath", "-o", str(out), "."],
        cwd=NULL_SOURCE,
        env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        return None, f"go build in {NULL_SOURCE} failed: {built.stderr.strip()[-400:]}"
    return out, ""


def start_null_extender(
    binary: Path, port: int, state_dir: Path, server: str
) -> subprocess.Popen[bytes]:
    """The null extender on ``port``, serving with the lab's extender certificate (kube-scheduler
    verifies it against the lab CA) and binding as the lab's admin; waits until it answers."""
    layout = Layout.at(state_dir)
    pki = layout.pki
    log = layout.log("null-extender").open("ab")
    process = subprocess.Popen(
        [
            str(binary),
            f"-listen={HOST}:{port}",
            f"-cert={pki / 'vslice-scheduler.crt'}",
            f"-key={pki / 'vslice-scheduler.key'}",
            f"-apiserver={server}",
            f"-ca={pki / 'ca.crt'}",
            f"-client-cert={pki / 'admin.crt'}",
            f"-client-key={pki / 'admin.key'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(
                f"https://{HOST}:{port}/healthz", context=context, timeout=2
            ):
                return process
        except OSError as error:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit(
                    f"the null extender did not answer on port {port}: {error}; "
                    f"see {layout.log('null-extender')}"
                ) from None
            time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU milliseconds per pod each lab process spent during one measurement: where the
    time goes (the API server's share grows with every write a bind makes).

    With an ``idle`` rate (CPU seconds per second each process spends with no pod being
    scheduled: kwok's node heartbeats, leases, watches), :meth:`per_pod` also shows what is
    left per pod once that background is taken out for the length of the run: a slower path
    otherwise looks dearer per pod by the background alone."""

    def __init__(self, processes: dict[str, int], idle: dict[str, float] | None = None) -> None:
        self._processes = processes
        self._idle = idle or {}
        self._began = time.monotonic()
        self._start = {name: cpu_seconds(pid) for name, pid in processes.items()}

    @staticmethod
    def idle_rates(processes: dict[str, int], seconds: float = 3.0) -> dict[str, float]:
        """CPU seconds per second of each process over ``seconds`` of nothing scheduled."""
        before = {name: cpu_seconds(pid) for name, pid in processes.items()}
        time.sleep(seconds)
        return {
            name: (cpu_seconds(pid) - before[name]) / seconds for name, pid in processes.items()
        }

    @staticmethod
    def settled(
        processes: dict[str, int], quiet: float = 0.15, limit: float = 120.0
    ) -> dict[str, float]:
        """The idle rates once the lab is quiet: a lab just started (thousands of kwok nodes
        reporting, controllers syncing) or the previous run's last pods (kwok's status
        writes) can keep a core busy for a minute, and a run measured meanwhile would be
        slowed by it. Waits until the lab uses under ``quiet`` cores (at most ``limit`` s)."""
        began = time.monotonic()
        while True:
            rates = CpuMeter.idle_rates(processes, 2.0)
            busy = sum(rates.values())
            if busy < quiet or time.monotonic() - began > limit:
                waited = time.monotonic() - began
                if waited > 2.5:
                    print(f"  waited {waited:.0f} s for the lab to settle ({busy:.2f} cores)")
                return rates

    def per_pod(self, pods: int) -> str:
        elapsed = time.monotonic() - self._began
        spent = {
            name: (cpu_seconds(pid) - self._start[name]) * 1000 / pods
            for name, pid in self._processes.items()
        }
        shown = sorted(((ms, name) for name, ms in spent.items() if ms >= 0.05), reverse=True)
        text = ", ".join(f"{name} {ms:.2f}" for ms, name in shown)
        if not self._idle:
            return text
        background = {name: self._idle.get(name, 0.0) * elapsed * 1000 / pods for name in spent}
        less = ", ".join(f"{name} {ms - background[name]:.2f}" for ms, name in shown)
        total = sum(spent.values())
        rest = total - sum(background.values())
        return (
            f"{text} (total {total:.2f}); less the idle background "
            f"({sum(self._idle.values()):.2f} cores for {elapsed:.1f} s): {less} (total {rest:.2f})"
        )


def _sampler(profile: Path | None, pid: int | None) -> subprocess.Popen[bytes] | None:
    if profile is None or pid is None:
        return None
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    command = [spy, "record", "--pid", str(pid), "--format", "raw", "--output", str(profile)]
    # --gil: only the thread holding the interpreter lock is sampled, so the profile shows
    # what the extender's threads compete for, not the time they wait on sockets.
    sampler = subprocess.Popen([*command, "--rate", "500", "--gil", "--nonblocking"])
    time.sleep(1.0)  # attached before the scheduler resumes
    return sampler


@dataclass(frozen=True)
class Pprof:
    """Where to take Go CPU profiles of kube-scheduler and kube-apiserver during a throughput
    run (their ``/debug/pprof/profile``, as the lab's admin: system:masters passes their
    delegated authorization), and where to write them."""

    state_dir: Path
    ports: dict[str, int]
    out: Path
    seconds: int = 10

    def start(self, label: str) -> list[threading.Thread]:
        pki = Layout.at(self.state_dir).pki
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        threads = []
        for component in ("kube-scheduler", "kube-apiserver"):
            url = (
                f"https://{HOST}:{self.ports[component]}/debug/pprof/profile?seconds={self.seconds}"
            )
            target = self.out / f"{label}.{component}.pb.gz"

            def fetch(url: str = url, target: Path = target) -> None:
                with urllib.request.urlopen(url, context=context, timeout=self.seconds + 30) as r:
                    target.write_bytes(r.read())

            thread = threading.Thread(target=fetch, daemon=True)
            thread.start()
            threads.append(thread)
        return threads

    def report(self, label: str, threads: list[threading.Thread]) -> None:
        """Wait for the profiles; print each one's top functions (``go tool pprof -top``)."""
        for thread in threads:
            thread.join(timeout=self.seconds + 40)
        go = binaries_module.find_go()
        for component in ("kube-scheduler", "kube-apiserver"):
            path = self.out / f"{label}.{component}.pb.gz"
            if not path.exists():
                print(f"  pprof {label} {component}: no profile", flush=True)
                continue
            if go is None:
                print(f"  pprof {label} {component}: {path} (no go to summarize it)", flush=True)
                continue
            top = subprocess.run(
                [go, "tool", "pprof", "-top", "-nodecount=15", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            print(f"  pprof {label} {component} ({path}):", flush=True)
            for line in top.stdout.splitlines()[:22]:
                print(f"    {line}", flush=True)


def measure(
    core: k8s.CoreV1Api,
    scheduler_pid: int,
    namespace: str,
    limits: dict[str, str],
    count: int,
    processes: dict[str, int] | None = None,
    profile: Path | None = None,
    pprof: Pprof | None = None,
) -> float:
    """Pods/s from resuming the paused scheduler to the last bind; with ``profile``, the
    extender's stacks are sampled meanwhile (py-spy, collapsed-stack text)."""
    _namespace(core, namespace)
    if limits == DRA:
        dra_template(core.api_client, namespace)
    binds = BindWatch(core, namespace, count)
    time.sleep(0.5)  # let the watch start
    idle = CpuMeter.settled(processes) if processes else None
    os.kill(scheduler_pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(
                pool.map(
                    lambda i: core.create_namespaced_pod(
                        namespace, pod(f"p{i:05d}", limits), _preload_content=False
                    ),
                    range(count),
                )
            )
        if limits == DRA:
            wait_claims(core.api_client, namespace, count)
    finally:
        sampler = _sampler(profile, (processes or {}).get("vslice-scheduler"))
        profiling = pprof.start(namespace) if pprof else []
        meter = CpuMeter(processes or {}, idle)
        started = time.monotonic()
        os.kill(scheduler_pid, signal.SIGCONT)
    if not binds.done.wait(timeout=600):
        raise SystemExit(f"only {len(binds.bound)} of {count} pods were bound within 600 s")
    if sampler is not None:
        sampler.send_signal(signal.SIGINT)
        sampler.wait(timeout=60)
        print(f"  extender profile: {profile}", flush=True)
    if processes:
        print(f"  {namespace} CPU ms per pod: {meter.per_pod(count)}", flush=True)
    if pprof is not None:  # after the CPU meter: the profiles may still be running
        pprof.report(namespace, profiling)
    return count / (binds.last_bind - started)


def latencies(
    core: k8s.CoreV1Api, namespace: str, limits: dict[str, str], count: int, rate: float
) -> tuple[float, float]:
    """p50 and p99 (ms) from a pod's creation to its bind, pods created at ``rate`` per s."""
    _namespace(core, namespace)
    if limits == DRA:
        dra_template(core.api_client, namespace)
    binds = BindWatch(core, namespace, count)
    time.sleep(0.5)
    created: dict[str, float] = {}
    lock = threading.Lock()
    begin = time.monotonic()

    def create(i: int) -> None:
        time.sleep(max(0.0, begin + i / rate - time.monotonic()))
        name = f"l{i:05d}"
        core.create_namespaced_pod(namespace, pod(name, limits), _preload_content=False)
        with lock:
            created[name] = time.monotonic()

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(create, range(count)))
    if not binds.done.wait(timeout=600):
        raise SystemExit(f"only {len(binds.bound)} of {count} pods were bound within 600 s")
    # A bind seen before the create call returned counts as 0 ms.
    waits = sorted(max(0.0, binds.bound[n] - t) * 1000 for n, t in created.items())
    return waits[len(waits) // 2], waits[min(len(waits) - 1, (len(waits) * 99) // 100)]


def _decisions(state_dir: Path, record: Any) -> str:
    """The extender's own count of its answers (retries would show as failed filters/binds)."""
    url = f"https://127.0.0.1:{record.ports['vslice-scheduler']}/metrics"
    context = ssl.create_default_context(cafile=str(Layout.at(state_dir).pki / "ca.crt"))
    with urllib.request.urlopen(url, context=context, timeout=10) as response:
        text = response.read().decode()
    found = []
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("vslice_extender_decisions_total{"):
            labels, _, value = line.rpartition(" ")
            if float(value):
                found.append(f"{labels.split('{', 1)[1].rstrip('}')}: {float(value):.0f}")
        for verb in ("filter", "bind"):
            for part in ("sum", "count"):
                if line.startswith(f"vslice_extender_{verb}_seconds_{part} "):
                    sums[f"{verb}_{part}"] = float(line.split()[1])
    for verb in ("filter", "bind"):
        if sums.get(f"{verb}_count"):
            mean = 1000 * sums[f"{verb}_sum"] / sums[f"{verb}_count"]
            found.append(f"{verb} handler mean {mean:.1f} ms")
    return "; ".join(found) or "none"


@dataclass
class Result:
    plain: float
    plain_latency: tuple[float, float]
    extender: float | None = None
    extender_latency: tuple[float, float] | None = None
    dra: float | None = None
    dra_latency: tuple[float, float] | None = None
    null: float | None = None
    null_latency: tuple[float, float] | None = None
    null_plain: float | None = None
    """Plain measured again in the null extender's own lab: ``null`` is compared with it."""

    @property
    def null_ratio(self) -> float | None:
        return self.null / self.null_plain if self.null and self.null_plain else None

    @property
    def of_null(self) -> float | None:
        """The vslice extender's ratio as a share of the null extender's: of what the
        protocol leaves, how much vslice's own work takes away."""
        ratio = self.extender / self.plain if self.extender else None
        null = self.null_ratio
        return ratio / null if ratio and null else None


def run_size(
    nodes: int,
    pods: int,
    latency_pods: int,
    rate: float,
    node_locks: bool,
    profile: Path | None = None,
    pprof_dir: Path | None = None,
) -> Result:
    with tempfile.TemporaryDirectory(prefix="vslice-bench-") as tmp:
        inv = Path(tmp) / "inventory.yaml"
        with_dra = dra_supported(KUBERNETES_VERSION)
        inv.write_text(yaml.safe_dump(inventory(nodes, with_dra)))
        services = all(lab_module.services_installed().values())
        options = lab_module.LabOptions(
            state_dir=Path(tmp) / "lab",
            inventory=inv,
            services=services,
            extra_node_resources={PLAIN: str(GPUS_PER_NODE * SLOTS_PER_GPU)},
            timeout=1800,
            extender_settings={"leader_election": not node_locks},
            # 5,000 nodes renewing 40 s leases would keep this machine busy by themselves.
            node_lease_seconds=1200,
            prometheus=False,  # its scrapes would be part of what is measured
            apiserver_profiling=pprof_dir is not None,
        )
        began = time.monotonic()
        record = lab_module.up(options)
        print(f"  lab with {nodes} nodes up in {time.monotonic() - began:.1f} s", flush=True)
        try:
            core = k8s.CoreV1Api(api_client(Layout.at(options.state_dir).kubeconfig, pool_size=32))
            scheduler = next(p.pid for p in record.processes if p.name == "kube-scheduler")
            processes = {p.name: p.pid for p in record.processes}
            pprof = Pprof(options.state_dir, record.ports, pprof_dir) if pprof_dir else None
            plain = measure(
                core, scheduler, "bench-plain", {PLAIN: "1"}, pods, processes, pprof=pprof
            )
            plain_latency = latencies(core, "lat-plain", {PLAIN: "1"}, latency_pods, rate)
            print(
                f"  plain:    {plain:8.1f} pods/s, p50 {plain_latency[0]:.0f} ms, "
                f"p99 {plain_latency[1]:.0f} ms",
                flush=True,
            )
            result = Result(plain, plain_latency)
            if with_dra:
                result.dra = measure(core, scheduler, "bench-dra", DRA, pods, processes)
                result.dra_latency = latencies(core, "lat-dra", DRA, latency_pods, rate)
                print(
                    f"  dra:      {result.dra:8.1f} pods/s, p50 {result.dra_latency[0]:.0f} ms, "
                    f"p99 {result.dra_latency[1]:.0f} ms",
                    flush=True,
                )
            if not services:
                return result
            gpu = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "5"}
            result.extender = measure(
                core, scheduler, "bench-extender", gpu, pods, processes, profile, pprof
            )
            result.extender_latency = latencies(core, "lat-extender", gpu, latency_pods, rate)
            print(f"  extender decisions: {_decisions(options.state_dir, record)}", flush=True)
            print(
                f"  extender: {result.extender:8.1f} pods/s, p50 {result.extender_latency[0]:.0f}"
                f" ms, p99 {result.extender_latency[1]:.0f} ms",
                flush=True,
            )
            return result
        finally:
            lab_module.down(options.state_dir)


@dataclass
class NullResult:
    plain: float
    plain_latency: tuple[float, float]
    null: float
    null_latency: tuple[float, float]


def run_null(
    nodes: int,
    pods: int,
    latency_pods: int,
    rate: float,
    binary: Path,
    pprof_dir: Path | None = None,
) -> NullResult:
    """Plain beside the null extender, in a lab of its own: kube-scheduler takes one binding
    extender only, so the vslice extender is not registered here (nor the webhook started).
    Plain is measured again in this lab so that the null ratio compares like with like."""
    with tempfile.TemporaryDirectory(prefix="vslice-bench-null-") as tmp:
        inv = Path(tmp) / "inventory.yaml"
        inv.write_text(yaml.safe_dump(inventory(nodes, dra=False)))
        port = free_ports(["null-extender"])["null-extender"]
        slots = str(GPUS_PER_NODE * SLOTS_PER_GPU)
        options = lab_module.LabOptions(
            state_dir=Path(tmp) / "lab",
            inventory=inv,
            services=False,
            extra_node_resources={PLAIN: slots, NULL: slots},
            extra_extenders=(ExtraExtender(f"https://{HOST}:{port}", NULL),),
            timeout=1800,
            node_lease_seconds=1200,
            prometheus=False,
            apiserver_profiling=pprof_dir is not None,
        )
        began = time.monotonic()
        record = lab_module.up(options)
        print(f"  null lab with {nodes} nodes up in {time.monotonic() - began:.1f} s", flush=True)
        process: subprocess.Popen[bytes] | None = None
        try:
            process = start_null_extender(binary, port, options.state_dir, record.server)
            core = k8s.CoreV1Api(api_client(Layout.at(options.state_dir).kubeconfig, pool_size=32))
            scheduler = next(p.pid for p in record.processes if p.name == "kube-scheduler")
            processes = {p.name: p.pid for p in record.processes}
            processes["null-extender"] = process.pid
            pprof = Pprof(options.state_dir, record.ports, pprof_dir) if pprof_dir else None
            plain = measure(core, scheduler, "bench-plain", {PLAIN: "1"}, pods, processes)
            plain_latency = latencies(core, "lat-plain", {PLAIN: "1"}, latency_pods, rate)
            null = measure(core, scheduler, "bench-null", {NULL: "1"}, pods, processes, pprof=pprof)
            null_latency = latencies(core, "lat-null", {NULL: "1"}, latency_pods, rate)
            print(
                f"  plain:    {plain:8.1f} pods/s (null lab), p50 {plain_latency[0]:.0f} ms, "
                f"p99 {plain_latency[1]:.0f} ms\n"
                f"  null:     {null:8.1f} pods/s, p50 {null_latency[0]:.0f} ms, "
                f"p99 {null_latency[1]:.0f} ms",
                flush=True,
            )
            return NullResult(plain, plain_latency, null, null_latency)
        finally:
            if process is not None:
                process.kill()
                process.wait()
            lab_module.down(options.state_dir)


def _number(value: float | None, digits: int) -> str:
    return "nan" if value is None else f"{value:.{digits}f}"


def _shown(value: float | None, width: int, digits: int = 1) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:{width}.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--pods", type=int, default=500, help="pods per throughput measurement")
    parser.add_argument("--latency-pods", type=int, default=200, help="pods per latency run")
    parser.add_argument("--rate", type=float, default=20.0, help="latency run: pods created/s")
    parser.add_argument(
        "--node-locks", action="store_true", help="the extender in node-lock mode (no Lease)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the extender with py-spy during its throughput run (PATH.<nodes>.txt)",
    )
    parser.add_argument(
        "--no-null", action="store_true", help="leave out the null extender's column"
    )
    parser.add_argument(
        "--pprof",
        type=Path,
        help="write Go CPU profiles of kube-scheduler and kube-apiserver during the plain, "
        "extender and null throughput runs into this directory and print their top functions",
    )
    args = parser.parse_args()
    null_binary, why_not = (None, "--no-null") if args.no_null else build_null_extender()
    if null_binary is None:
        print(f"null extender left out: {why_not}", flush=True)
    results = {}
    mode = "node locks" if args.node_locks else "leader election"
    for size in args.sizes:
        print(f"nodes={size}, {args.pods} pods per measurement, extender: {mode}", flush=True)
        profile = args.profile.with_suffix(f".{size}.txt") if args.profile else None
        pprof_dir = args.pprof / str(size) if args.pprof else None
        if pprof_dir is not None:
            pprof_dir.mkdir(parents=True, exist_ok=True)
        results[size] = run_size(
            size, args.pods, args.latency_pods, args.rate, args.node_locks, profile, pprof_dir
        )
        if null_binary is not None:
            null_dir = pprof_dir / "null" if pprof_dir else None
            if null_dir is not None:
                null_dir.mkdir(exist_ok=True)
            n = run_null(size, args.pods, args.latency_pods, args.rate, null_binary, null_dir)
            results[size].null = n.null
            results[size].null_latency = n.null_latency
            results[size].null_plain = n.plain
    print(
        f"\n{'nodes':>6} {'plain pods/s':>13} {'extender pods/s':>16} {'null pods/s':>12} "
        f"{'dra pods/s':>11} {'ratio':>6} {'null ratio':>10} {'of null':>8} {'dra ratio':>9}"
    )
    for size, r in results.items():
        print(
            f"{size:>6} {r.plain:13.1f} {_shown(r.extender, 16)} {_shown(r.null, 12)} "
            f"{_shown(r.dra, 11)} {_shown(r.extender and r.extender / r.plain, 6, 2)} "
            f"{_shown(r.null_ratio, 10, 2)} "
            f"{_shown(r.of_null, 8, 2)} "
            f"{_shown(r.dra and r.dra / r.plain, 9, 2)}"
        )
    for size, r in results.items():
        nan = (float("nan"), float("nan"))
        e50, e99 = r.extender_latency or nan
        d50, d99 = r.dra_latency or nan
        n50, n99 = r.null_latency or nan
        print(
            f"scheduling nodes={size} plain_pods_per_s={r.plain:.1f} "
            f"extender_pods_per_s={_number(r.extender, 1)} dra_pods_per_s={_number(r.dra, 1)} "
            f"null_pods_per_s={_number(r.null, 1)} "
            f"ratio={_number(r.extender and r.extender / r.plain, 3)} "
            f"dra_ratio={_number(r.dra and r.dra / r.plain, 3)} "
            f"null_ratio={_number(r.null_ratio, 3)} "
            f"of_null={_number(r.of_null, 3)} "
            f"plain_p50_ms={r.plain_latency[0]:.0f} plain_p99_ms={r.plain_latency[1]:.0f} "
            f"extender_p50_ms={e50:.0f} extender_p99_ms={e99:.0f} "
            f"dra_p50_ms={d50:.0f} dra_p99_ms={d99:.0f} "
            f"null_p50_ms={n50:.0f} null_p99_ms={n99:.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
