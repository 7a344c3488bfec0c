"""``vslice serve``: settings from a YAML file and ``VSLICE_*``, /healthz, JSON logs, SIGTERM.

The webhook runs as a real process started by the real command line; the scheduler needs a
cluster and is started the same way by the end-to-end tests.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from served import Reply, call, client_context, serving_pair
from vslice_core.errors import InvalidRequest
from vslice_serving.httpserve import HttpService, Response
from vslice_serving.settings import SchedulerSettings, WebhookSettings, load_settings

VSLICE = [sys.executable, "-m", "vslice.cli"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def write_config(path: Path, **settings: object) -> Path:
    path.write_text(yaml.safe_dump(settings))
    return path


def test_the_environment_overrides_the_file_which_overrides_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path / "s.yaml", listen="127.0.0.1:9001", log_level="DEBUG")
    monkeypatch.setenv("VSLICE_LISTEN", "127.0.0.1:9002")
    monkeypatch.setenv("VSLICE_RESOURCES__GPU", "example.com/gpu")
    settings = load_settings(SchedulerSettings, config)
    assert settings.listen_address == ("127.0.0.1", 9002)
    assert settings.log_level == "debug"
    assert settings.resources.gpu == "example.com/gpu"
    assert settings.lock_ttl_seconds == 15.0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("lissten: 127.0.0.1:1\n", "unknown setting 'lissten'"),
        ("listen: nowhere\n", "listen must be HOST:PORT, got 'nowhere'"),
        ("log_level: loud\n", "log_level"),
        ("- a list\n", "must be a mapping of settings"),
        ("listen: [\n", "bad.yaml must be valid YAML or JSON, got .* at line 2$"),
    ],
)
def test_a_bad_setting_is_reported_by_name_and_value(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(InvalidRequest, match=expected.replace("[", r"\[")):
        load_settings(WebhookSettings, path)


def test_a_nested_setting_in_the_environment_that_is_not_json_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VSLICE_RESOURCES", "{bad")
    with pytest.raises(
        InvalidRequest, match=r"^settings: VSLICE_RESOURCES must be a JSON object .* got '\{bad'$"
    ):
        load_settings(WebhookSettings)


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="cannot read"):
        load_settings(WebhookSettings, tmp_path / "absent.yaml")


def test_serve_rejects_a_bad_config_with_status_2(tmp_path: Path) -> None:
    config = write_config(tmp_path / "s.yaml", listen="nowhere")
    result = subprocess.run(
        [*VSLICE, "serve", "webhook", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "listen must be HOST:PORT, got 'nowhere'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_webhook_serves_healthz_logs_json_and_stops_on_sigterm(tmp_path: Path) -> None:
    ca, serving = serving_pair(tmp_path)
    port = free_port()
    config = write_config(
        tmp_path / "webhook.yaml",
        listen=f"127.0.0.1:{port}",
        tls_cert_file=str(serving.cert),
        tls_key_file=str(serving.key),
        enforce_quota=False,
    )
    env = {**os.environ, "VSLICE_LOG_LEVEL": "debug"}
    process = subprocess.Popen(
        [*VSLICE, "serve", "webhook", "--config", str(config)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        reply = _wait_for_health(port, client_context(ca))
        assert (reply.status, reply.body) == (200, b"ok")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert all(line["service"] == "webhook" and "ts" in line for line in lines)
    messages = [line["msg"] for line in lines]
    assert "serving" in messages and "stopped" in messages


def _wait_for_health(port: int, tls: ssl.SSLContext) -> Reply:
    deadline = time.monotonic() + 30
    while True:
        try:
            return call(port, "GET", "/healthz", tls=tls)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_every_setting_of_every_service_is_in_the_configuration_reference() -> None:
    from vslice_node.agent.flatkeys import FLAT_KEYS
    from vslice_node.agent.groups import GROUPS
    from vslice_node.agent.settings import NodeAgentSettings
    from vslice_node.monitor.settings import MonitorSettings

    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    sections = {
        "vslice serve scheduler": SchedulerSettings,
        "vslice serve webhook": WebhookSettings,
        "vslice serve device-plugin": NodeAgentSettings,
        "vslice serve monitor": MonitorSettings,
    }
    shared = text.split("## What every service shares", 1)[1].split("\n## ", 1)[0]
    for title, settings in sections.items():
        section = text.split(f"## `{title}`", 1)[1].split("\n## ", 1)[0]
        for name in settings.model_fields:
            if settings is NodeAgentSettings and name in GROUPS:
                assert f"### `{name}`" in section, f"group {name} of {title} is not documented"
                continue
            assert f"| `{name}` |" in section + shared, f"{name} of {title} is not documented"
    # The node agent's grouped settings, each with the flat key that still selects it.
    agent = text.split("## `vslice serve device-plugin`", 1)[1].split("\n## ", 1)[0]
    for flat, (group, leaf) in FLAT_KEYS.items():
        row = f"| `{group}.{leaf}` | `{flat}` |"
        assert row in agent, f"{group}.{leaf} (flat {flat}) of the node agent is not documented"


def test_stopping_lets_a_call_being_handled_finish() -> None:
    entered, finished = threading.Event(), threading.Event()

    def slow(_: bytes) -> Response:
        entered.set()
        time.sleep(0.5)
        finished.set()
        return Response.text("done")

    service = HttpService(("127.0.0.1", 0), {("POST", "/slow"): slow})
    service.start()
    replies: list[Reply] = []

    def caller() -> None:
        replies.append(call(service.port, "POST", "/slow", b""))

    thread = threading.Thread(target=caller)
    thread.start()
    assert entered.wait(5)
    service.stop()
    assert finished.is_set(), "stop() returned while a call was still being handled"
    thread.join(5)
    assert [(r.status, r.body) for r in replies] == [(200, b"done")]
