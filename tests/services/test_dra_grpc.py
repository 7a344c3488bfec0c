"""The DRA kubelet plugin's wire layer over real gRPC on real unix sockets.

The test plays the kubelet the way its plugin watcher and DRA manager do: it dials the
registration socket in the registry directory, calls GetInfo, dials the endpoint named there,
sends its verdict with NotifyRegistrationStatus, then calls NodePrepareResources and
NodeUnprepareResources. Only the claim logic is a stand-in (``FakePreparer``); everything
between the sockets and the ``ClaimPreparer`` protocol is the real code.

Sockets live under ``short_dir`` rather than ``tmp_path``: a unix socket path is limited to 107
bytes and pytest's temporary paths can be longer.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from vslice_core.errors import ClusterError
from vslice_node.dra.api import dra_pb2 as pb
from vslice_node.dra.api import dra_pb2_grpc as pb_grpc
from vslice_node.dra.api import pluginregistration_pb2 as reg
from vslice_node.dra.api import pluginregistration_pb2_grpc as reg_grpc
from vslice_node.dra.claims import (
    ClaimError,
    ClaimPreparer,
    ClaimRef,
    Prepared,
    PreparedDevice,
)
from vslice_node.dra.server import DRAPluginServer, remove_stale_socket

GOOD = pb.Claim(namespace="team-a", uid="uid-good", name="train-gpu")
BAD = pb.Claim(namespace="team-a", uid="uid-bad", name="broken-gpu")

DEVICE = PreparedDevice(
    request_names=("gpu",),
    pool_name="node-1",
    device_name="gpu-0-slice-1",
    cdi_device_ids=("gpu.vslice.io/slice=gpu-0-slice-1",),
)


@dataclass
class FakePreparer:
    """Stands in for the node's claim logic: every claim gets ``DEVICE`` except those named in
    ``refuse`` (answered with a ClaimError) or ``explode`` (an exception while they are in the
    batch); ``whole_call`` makes every call raise."""

    refuse: set[str] = field(default_factory=set)
    explode: set[str] = field(default_factory=set)
    whole_call: Exception | None = None
    extra_uid: str = ""
    calls: list[tuple[str, list[str]]] = field(default_factory=list)

    def _check(self, verb: str, claims: Sequence[ClaimRef]) -> None:
        self.calls.append((verb, [c.uid for c in claims]))
        if self.whole_call is not None:
            raise self.whole_call
        for claim in claims:
            if claim.uid in self.explode:
                raise RuntimeError(f"lost the device node of {claim.uid}")

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, Prepared | ClaimError]:
        self._check("prepare", claims)
        answer: dict[str, Prepared | ClaimError] = {
            c.uid: ClaimError("no slice left on gpu-0")
            if c.uid in self.refuse
            else Prepared((DEVICE,))
            for c in claims
        }
        if self.extra_uid:
            answer[self.extra_uid] = Prepared(())
        return answer

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimError | None]:
        self._check("unprepare", claims)
        return {c.uid: ClaimError("device busy") if c.uid in self.refuse else None for c in claims}


def conforms(preparer: ClaimPreparer) -> ClaimPreparer:
    """mypy checks here that the stand-in implements the protocol the colleague's logic does."""
    return preparer


@dataclass
class Plugin:
    server: DRAPluginServer
    preparer: FakePreparer
    registry: Path
    dra_socket: Path


@pytest.fixture
def make_plugin(short_dir: Path) -> Iterator[Callable[[], Plugin]]:
    started: list[DRAPluginServer] = []

    def make() -> Plugin:
        preparer = FakePreparer()
        registry = short_dir / "plugins_registry"
        dra_socket = short_dir / "plugins" / "gpu.vslice.io" / "dra.sock"
        server = DRAPluginServer(conforms(preparer), registry_dir=registry, dra_socket=dra_socket)
        started.append(server)
        return Plugin(server, preparer, registry, dra_socket)

    yield make
    for server in started:
        server.stop(grace_s=0)


@pytest.fixture
def plugin(make_plugin: Callable[[], Plugin]) -> Plugin:
    made = make_plugin()
    made.server.start()
    return made


def channel(path: Path) -> grpc.Channel:
    opened = grpc.insecure_channel(f"unix://{path}")
    grpc.channel_ready_future(opened).result(timeout=10)
    return opened


def registration_client(plugin: Plugin) -> reg_grpc.RegistrationStub:
    return reg_grpc.RegistrationStub(channel(plugin.registry / "gpu.vslice.io-reg.sock"))  # type: ignore[no-untyped-call]


def dra_client(endpoint: str) -> pb_grpc.DRAPluginStub:
    return pb_grpc.DRAPluginStub(channel(Path(endpoint)))  # type: ignore[no-untyped-call]


def leave_stale_socket(path: Path) -> None:
    """A socket file whose server is gone, as a killed plugin leaves it: connecting is refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))
    assert path.is_socket()


# -- registration ---------------------------------------------------------------------------------


def test_get_info_names_the_driver_its_endpoint_and_the_v1_service(plugin: Plugin) -> None:
    info = registration_client(plugin).GetInfo(reg.InfoRequest(), timeout=5)
    assert info.type == "DRAPlugin"
    assert info.name == "gpu.vslice.io"
    assert info.endpoint == str(plugin.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    assert plugin.server.state.info_requests == 1


def test_the_kubelets_verdict_is_recorded(plugin: Plugin, caplog: pytest.LogCaptureFixture) -> None:
    client = registration_client(plugin)
    assert not plugin.server.registered
    client.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
    assert plugin.server.registered
    assert plugin.server.state.notifications == 1

    refusal = "none of services supported by the plugin are supported by the kubelet"
    with caplog.at_level(logging.ERROR, logger="vslice.draplugin.registration"):
        client.NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=False, error=refusal), timeout=5
        )
    assert not plugin.server.registered
    assert plugin.server.state.error == refusal
    assert plugin.server.state.wait_for_notification(after=1, timeout_s=0)
    refused = [
        r for r in caplog.records if r.getMessage() == "the kubelet refused the registration"
    ]
    assert [getattr(r, "error", None) for r in refused] == [refusal]


def test_a_driver_name_of_choice_names_the_socket_and_the_info(short_dir: Path) -> None:
    server = DRAPluginServer(
        FakePreparer(),
        driver_name="other.example.com",
        registry_dir=short_dir / "reg",
        dra_socket=short_dir / "o" / "dra.sock",
    )
    with server:
        stub = reg_grpc.RegistrationStub(channel(short_dir / "reg" / "other.example.com-reg.sock"))  # type: ignore[no-untyped-call]
        assert stub.GetInfo(reg.InfoRequest(), timeout=5).name == "other.example.com"
    assert not (short_dir / "reg" / "other.example.com-reg.sock").exists()


# -- prepare and unprepare ------------------------------------------------------------------------


def test_prepare_answers_each_claim_and_one_refusal_spoils_nothing_else(plugin: Plugin) -> None:
    plugin.preparer.refuse = {BAD.uid}
    info = registration_client(plugin).GetInfo(reg.InfoRequest(), timeout=5)
    client = dra_client(info.endpoint)  # the kubelet dials what GetInfo named

    response = client.NodePrepareResources(
        pb.NodePrepareResourcesRequest(claims=[GOOD, BAD]), timeout=5
    )

    assert set(response.claims) == {GOOD.uid, BAD.uid}
    good = response.claims[GOOD.uid]
    assert good.error == ""
    assert [
        (
            list(d.request_names),
            d.pool_name,
            d.device_name,
            list(d.cdi_device_ids),
            d.HasField("share_id"),
        )
        for d in good.devices
    ] == [(["gpu"], "node-1", "gpu-0-slice-1", ["gpu.vslice.io/slice=gpu-0-slice-1"], False)]
    bad = response.claims[BAD.uid]
    assert "team-a/broken-gpu" in bad.error
    assert "no slice left on gpu-0" in bad.error
    assert list(bad.devices) == []
    assert plugin.preparer.calls == [("prepare", [GOOD.uid, BAD.uid])]


def test_an_exception_for_one_claim_becomes_that_claims_error(plugin: Plugin) -> None:
    plugin.preparer.explode = {BAD.uid}
    client = dra_client(str(plugin.dra_socket))

    response = client.NodePrepareResources(
        pb.NodePrepareResourcesRequest(claims=[GOOD, BAD]), timeout=5
    )

    assert response.claims[GOOD.uid].error == ""
    assert len(response.claims[GOOD.uid].devices) == 1
    error = response.claims[BAD.uid].error
    assert "team-a/broken-gpu" in error
    assert "RuntimeError: lost the device node of uid-bad" in error
    # The batch failed, then each claim was asked about on its own.
    assert plugin.preparer.calls == [
        ("prepare", [GOOD.uid, BAD.uid]),
        ("prepare", [GOOD.uid]),
        ("prepare", [BAD.uid]),
    ]


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (RuntimeError("checkpoint unreadable"), grpc.StatusCode.INTERNAL),
        (ClusterError("API server unreachable"), grpc.StatusCode.UNAVAILABLE),
    ],
)
def test_a_whole_call_failure_is_a_grpc_status_with_a_message(
    plugin: Plugin, exc: Exception, code: grpc.StatusCode
) -> None:
    plugin.preparer.whole_call = exc
    client = dra_client(str(plugin.dra_socket))
    for call, request in (
        (client.NodePrepareResources, pb.NodePrepareResourcesRequest(claims=[GOOD, BAD])),
        (client.NodeUnprepareResources, pb.NodeUnprepareResourcesRequest(claims=[GOOD])),
    ):
        with pytest.raises(grpc.RpcError) as raised:
            call(request, timeout=5)
        assert isinstance(raised.value, grpc.Call)
        assert raised.value.code() == code
        assert str(exc) in (raised.value.details() or "")


def test_share_ids_travel_and_unknown_or_missing_claims_are_handled(
    plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    shared = PreparedDevice(("gpu",), "node-1", "gpu-0", ("gpu.vslice.io/gpu=gpu-0",), "share-7")

    class Sharing(FakePreparer):
        def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, Prepared | ClaimError]:
            # Answers for a UID nobody asked about, and leaves out the second claim.
            return {claims[0].uid: Prepared((shared,)), "uid-stranger": Prepared(())}

    plugin.server.dra.preparer = Sharing()
    with caplog.at_level(logging.WARNING, logger="vslice.draplugin.grpc"):
        response = dra_client(str(plugin.dra_socket)).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=[GOOD, BAD]), timeout=5
        )
    dropped = [
        getattr(r, "uids", None) for r in caplog.records if "not asked about" in r.getMessage()
    ]
    assert dropped == [["uid-stranger"]]
    # The kubelet rejects a whole response naming a claim it did not ask about.
    assert set(response.claims) == {GOOD.uid, BAD.uid}
    (device,) = response.claims[GOOD.uid].devices
    assert device.HasField("share_id") and device.share_id == "share-7"
    assert "team-a/broken-gpu" in response.claims[BAD.uid].error


def test_a_claim_without_uid_refuses_the_call(plugin: Plugin) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        dra_client(str(plugin.dra_socket)).NodePrepareResources(
            pb.NodePrepareResourcesRequest(claims=[pb.Claim(namespace="a", name="b")]), timeout=5
        )
    assert isinstance(raised.value, grpc.Call)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert plugin.preparer.calls == []


def test_unprepare_answers_every_claim(plugin: Plugin) -> None:
    plugin.preparer.refuse = {BAD.uid}
    response = dra_client(str(plugin.dra_socket)).NodeUnprepareResources(
        pb.NodeUnprepareResourcesRequest(claims=[GOOD, BAD]), timeout=5
    )
    assert set(response.claims) == {GOOD.uid, BAD.uid}
    assert response.claims[GOOD.uid].error == ""
    assert "team-a/broken-gpu" in response.claims[BAD.uid].error
    assert "device busy" in response.claims[BAD.uid].error
    assert plugin.preparer.calls == [("unprepare", [GOOD.uid, BAD.uid])]


def test_each_socket_serves_only_its_own_service(plugin: Plugin) -> None:
    wrong = pb_grpc.DRAPluginStub(channel(plugin.registry / "gpu.vslice.io-reg.sock"))  # type: ignore[no-untyped-call]
    with pytest.raises(grpc.RpcError) as raised:
        wrong.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[GOOD]), timeout=5)
    assert isinstance(raised.value, grpc.Call)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


# -- sockets --------------------------------------------------------------------------------------


def test_stale_sockets_are_replaced_at_start_and_removed_at_stop(
    make_plugin: Callable[[], Plugin],
) -> None:
    made = make_plugin()
    reg_socket = made.registry / "gpu.vslice.io-reg.sock"
    leave_stale_socket(reg_socket)
    leave_stale_socket(made.dra_socket)
    with pytest.raises(ConnectionRefusedError), socket.socket(socket.AF_UNIX) as probe:
        probe.connect(str(made.dra_socket))

    made.server.start()
    assert made.server.serving
    info = registration_client(made).GetInfo(reg.InfoRequest(), timeout=5)
    response = dra_client(info.endpoint).NodePrepareResources(
        pb.NodePrepareResourcesRequest(claims=[GOOD]), timeout=5
    )
    assert response.claims[GOOD.uid].error == ""
    registration_client(made).NotifyRegistrationStatus(
        reg.RegistrationStatus(plugin_registered=True), timeout=5
    )
    assert made.server.registered

    made.server.stop()
    assert not reg_socket.exists()
    assert not made.dra_socket.exists()
    assert not made.server.serving
    assert not made.server.registered
    made.server.stop()  # a second stop is harmless


def test_only_a_socket_counts_as_stale(short_dir: Path) -> None:
    # grpcio also unlinks a stale unix socket before binding; the plugin does not rely on it.
    stale = short_dir / "stale.sock"
    leave_stale_socket(stale)
    assert remove_stale_socket(stale)
    assert not stale.exists()
    assert not remove_stale_socket(stale)
    stale.mkdir()
    with pytest.raises(FileExistsError):
        remove_stale_socket(stale)
    assert stale.is_dir()


def test_a_file_that_is_not_a_socket_is_left_alone(make_plugin: Callable[[], Plugin]) -> None:
    made = make_plugin()
    made.dra_socket.parent.mkdir(parents=True)
    made.dra_socket.write_text("someone else's file")
    with pytest.raises(FileExistsError, match="not a socket"):
        made.server.start()
    assert made.dra_socket.read_text() == "someone else's file"
    assert not made.server.serving
    assert not (made.registry / "gpu.vslice.io-reg.sock").exists()


def test_a_restart_serves_again_on_the_same_paths(make_plugin: Callable[[], Plugin]) -> None:
    # The kubelet re-registers by finding the registration socket again (its plugin watcher),
    # so a plugin that starts over only has to serve the same paths again.
    first = make_plugin()
    first.server.start()
    first.server.stop()
    second = make_plugin()
    second.server.start()
    info = registration_client(second).GetInfo(reg.InfoRequest(), timeout=5)
    assert info.endpoint == str(second.dra_socket)
