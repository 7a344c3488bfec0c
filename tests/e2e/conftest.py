"""Fixtures for end-to-end tests against the local lab (the same code as ``vslice lab up``).

Every test in this folder is marked ``lab`` automatically. Use the fixtures, never a lab of
your own, so the whole run pays for one control plane:

- ``lab`` (session): one running lab for the whole test session, torn down at the end even when
  tests fail. It is a :class:`LabHandle`: ``kubeconfig``, ``api`` (an ApiClient), ``core``
  (CoreV1Api), ``record`` (ports, pids, node names), ``extender`` (the recording extender,
  see ``recording_extender.py``: every filter/bind call kube-scheduler made), ``services``
  (True when the real vslice extender and webhook run), and pod helpers ``create_pod``,
  ``read_pod``, ``wait_for_pod``.
- ``namespace`` (per test): a fresh namespace whose ``default`` service account exists, deleted
  after the test, with Pod Security ``baseline`` enforced like the lab's GPU namespaces.
  Create everything of your test in it.
- ``lab_state_dir`` (session): where the lab keeps logs and certificates.
- ``stopped_lab`` (session): the session's lab after ``vslice lab down``, for tests of what
  ``down`` leaves behind and tests that need the machine free for a lab of their own (one real
  node per machine). Tests that ask for it are moved behind every other test of the run.
- ``real_node`` (per test): the lab's real node (a kubelet and containerd on this machine, the
  fake driver standing in for its GPUs) as a :class:`RealNode`; a test that needs it fails
  (never skips) when the lab has none, with the reason the lab gave.
- ``classes`` (per test): two PriorityClasses, ``low`` (0) and ``high`` (1000), named per
  test and removed afterwards (the preemption tests).

``VSLICE_E2E_SERVICES=on|off`` forces the real vslice services in or out (default: in when
both the extender and the webhook are installed).

When a test that uses the lab fails, the lines each component wrote to its log during that
test are attached to the failure report (sections "lab log: <component>").
"""

from __future__ import annotations

import atexit
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hostprint import HostPrint, fingerprint
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from recording_extender import ProxyTls, RecordingExtender
from vslice_control.install.namespaces import pod_security_labels
from vslice_kube.client import api_client
from vslice_lab import lab as lab_module
from vslice_lab.layout import Layout
from vslice_lab.state import LabRecord

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventory" / "lab" / "cluster.yaml"
LOG_LINES_ON_FAILURE = 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)
    # Tests that ask for ``stopped_lab`` stop the session's lab: they run right after the last
    # other test of this folder (the lab's users), whatever their file is called, in the order
    # they were collected, so the lab's processes are gone before the rest of the run.
    last = [item for item in items if "stopped_lab" in getattr(item, "fixturenames", ())]
    if last:
        keep = [item for item in items if item not in last]
        ours = [i for i, item in enumerate(keep) if here in Path(str(item.fspath)).parents]
        at = ours[-1] + 1 if ours else len(keep)
        items[:] = keep[:at] + last + keep[at:]


@dataclass
class LabHandle:
    """The running session lab and the clients to use it (see the module docstring)."""

    state_dir: Path
    record: LabRecord
    kubeconfig: Path
    api: k8s.ApiClient
    extender: RecordingExtender
    services: bool
    host_before: HostPrint

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    @property
    def logs(self) -> Path:
        return Layout.at(self.state_dir).logs

    def create_pod(
        self,
        namespace: str,
        name: str,
        *,
        limits: dict[str, str] | None = None,
        scheduler_name: str | None = None,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a one-container pod (image never pulled: kwok runs it) and return it."""
        container: dict[str, Any] = {"name": "main", "image": "registry.invalid/sleep:1"}
        if limits:
            container["resources"] = {"limits": limits}
        spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
        if scheduler_name:
            spec["schedulerName"] = scheduler_name
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec,
        }
        response = self.core.create_namespaced_pod(namespace, body, _preload_content=False)
        return _json(response)

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return _json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))

    def wait_for_pod(
        self,
        namespace: str,
        name: str,
        condition: Callable[[dict[str, Any]], bool],
        *,
        what: str,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Poll the pod until ``condition(pod)``; fail the test with ``what`` and the pod's
        last state otherwise."""
        deadline = time.monotonic() + timeout
        pod = self.read_pod(namespace, name)
        while not condition(pod):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"pod {namespace}/{name} did not reach '{what}' within {timeout:.0f}s; "
                    f"last status: {pod.get('status')}; node: {pod['spec'].get('nodeName')}"
                )
            time.sleep(0.2)
            pod = self.read_pod(namespace, name)
        return pod


def _json(response: Any) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads(response.data)
    return data


def _binder(api: k8s.ApiClient) -> Callable[[str, str, str, str], None]:
    core = k8s.CoreV1Api(api)

    def bind(namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        core.create_namespaced_binding(namespace, body, _preload_content=False)

    return bind


def _want_services() -> bool:
    """Real vslice extender and webhook: ``VSLICE_E2E_SERVICES`` = on | off | auto (default:
    on when both are installed)."""
    choice = os.environ.get("VSLICE_E2E_SERVICES", "auto").lower()
    if choice in ("on", "off"):
        return choice == "on"
    return all(lab_module.services_installed().values())


@pytest.fixture(scope="session")
def lab_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lab")


@pytest.fixture(scope="session")
def lab(lab_state_dir: Path) -> Iterator[LabHandle]:
    """One lab per session (see the module docstring)."""
    services = _want_services()
    # The lab reuses certificates it finds, so the proxy can serve TLS before the lab is up.
    certs = lab_module.prepare_pki(Layout.at(lab_state_dir))
    tls = ProxyTls(
        certs.ca.cert,
        certs.extender.cert,
        certs.extender.key,
        certs.scheduler.cert,
        certs.scheduler.key,
    )
    extender = RecordingExtender(tls=tls).start()
    options = lab_module.LabOptions(
        state_dir=lab_state_dir,
        inventory=INVENTORY,
        services=services,
        extender_url=extender.url,
        # Kueue's team queues (test_kueue_lab): one more process in the one session lab.
        kueue=services,
    )
    host_before = fingerprint()
    # Registered before up(): a session killed half way still stops what was started.
    atexit.register(lab_module.down, lab_state_dir)
    try:
        record = lab_module.up(options)
    except lab_module.LabError as error:
        extender.stop()
        pytest.fail(f"the lab did not come up: {error}", pytrace=False)
    kubeconfig = Layout.at(lab_state_dir).kubeconfig
    api = api_client(kubeconfig, pool_size=16)
    if services:
        extender.upstream = f"https://127.0.0.1:{record.ports['vslice-scheduler']}"
    else:
        extender.binder = _binder(api)
    try:
        yield LabHandle(lab_state_dir, record, kubeconfig, api, extender, services, host_before)
    finally:
        extender.stop()
        lab_module.down(lab_state_dir)
        atexit.unregister(lab_module.down)


@dataclass(frozen=True)
class StoppedLab:
    """The session's lab after ``down``: its handle and what ``down`` stopped."""

    handle: LabHandle
    stopped: list[str] | None


@pytest.fixture(scope="session")
def stopped_lab(lab: LabHandle) -> StoppedLab:
    """Stops the session's lab (see the module docstring); ``lab``'s own teardown then finds
    nothing to stop, as ``down`` is idempotent."""
    return StoppedLab(lab, lab_module.down(lab.state_dir))


@pytest.fixture
def services(lab: LabHandle) -> LabHandle:
    """The lab, which must run the real vslice extender and webhook: a test that needs them
    fails (never skips) when they are missing or switched off."""
    if not lab.services:
        pytest.fail(
            "this test needs the vslice extender and webhook in the lab (VSLICE_E2E_SERVICES)"
        )
    return lab


@pytest.fixture
def namespace(lab: LabHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, with its default service account ready."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in request.node.name.lower())[:40]
    name = f"e2e-{slug.strip('-')}-{uuid.uuid4().hex[:5]}"
    core = lab.core
    # Labelled like the lab's GPU namespaces: Pod Security "baseline" is enforced in it.
    metadata = {"name": name, "labels": pod_security_labels()}
    core.create_namespace({"metadata": metadata}, _preload_content=False)
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name, _preload_content=False)
            break
        except ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    yield name
    try:
        core.delete_namespace(name, _preload_content=False)
    except ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture(autouse=True)
def _lab_log_marks(request: pytest.FixtureRequest) -> None:
    """Remember how long each component log was when the test started."""
    if "lab" not in request.fixturenames:
        return
    handle: LabHandle = request.getfixturevalue("lab")
    request.node.stash[_LOG_MARKS] = {
        log: log.stat().st_size for log in handle.logs.glob("*.log") if log.exists()
    }


_LOG_MARKS = pytest.StashKey[dict[Path, int]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    marks = item.stash.get(_LOG_MARKS, None)
    if report.failed and marks is not None and call.when in ("setup", "call", "teardown"):
        for log, start in sorted(marks.items()):
            with log.open("rb") as handle:
                handle.seek(start)
                text = handle.read().decode(errors="replace")
            lines = text.rstrip().splitlines()[-LOG_LINES_ON_FAILURE:]
            if lines:
                report.sections.append((f"lab log: {log.stem}", "\n".join(lines)))
    return report


@pytest.fixture
def real_node(services: LabHandle, namespace: str) -> Iterator[Any]:
    """The lab's real node (see the module docstring); the test's pods are deleted, and waited
    for, afterwards, so their slots are free for the next test."""
    from realnode_pods import real_node_of

    node = real_node_of(services)
    yield node
    node.delete_all(namespace)


@pytest.fixture
def classes(real_node: Any) -> Iterator[dict[str, str]]:
    """Two PriorityClasses of this test, ``low`` (0) and ``high`` (1000); removed afterwards."""
    api: Any = k8s.SchedulingV1Api(real_node.lab.api)
    suffix = uuid.uuid4().hex[:6]
    names = {"low": f"e2e-low-{suffix}", "high": f"e2e-high-{suffix}"}
    for level, value in (("low", 0), ("high", 1000)):
        body = {"metadata": {"name": names[level]}, "value": value, "globalDefault": False}
        api.create_priority_class(body, _preload_content=False)
    yield names
    for name in names.values():
        api.delete_priority_class(name, _preload_content=False)
