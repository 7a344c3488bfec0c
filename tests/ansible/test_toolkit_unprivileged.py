"""The toolkit role keeps GPUs out of reach of an unprivileged container's environment: its
``unprivileged.yml`` tasks, run on this host against a config.toml in tmp_path."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import yaml
from bringup import run, tool

# The top of the file nvidia-container-toolkit installs, shortened.
PACKAGED = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
"""


def _config(tmp_path: Path) -> Path:
    directory = tmp_path / "nvidia-container-runtime"
    directory.mkdir(mode=0o755, exist_ok=True)
    directory.chmod(0o755)
    return directory / "config.toml"


def _converge(tmp_path: Path, **variables: object) -> str:
    play = {
        "name": "NVIDIA runtime configuration",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Configure",
                "ansible.builtin.include_role": {
                    "name": "nvidia_container_toolkit",
                    "tasks_from": "unprivileged.yml",
                },
            }
        ],
    }
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play]))
    overrides = tmp_path / "vars.json"
    overrides.write_text(
        json.dumps(
            {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "nvidia_container_toolkit_runtime_config": str(_config(tmp_path)),
                **variables,
            }
        )
    )
    result = run(tool("ansible-playbook"), "-e", f"@{overrides}", str(playbook), timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return output


def test_the_packaged_file_refuses_the_environment_and_volume_mounts_idempotently(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    config.write_text(PACKAGED)
    first = _converge(tmp_path)
    assert "changed=2" in first, first[-3000:]
    parsed = tomllib.loads(config.read_text())
    assert parsed["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
    assert parsed["accept-nvidia-visible-devices-as-volume-mounts"] is False
    # Every other setting stays where it was, and nothing lands inside a table.
    assert parsed["nvidia-container-runtime"] == {"log-level": "info", "mode": "auto"}
    assert parsed["nvidia-container-cli"]["load-kmods"] is True
    assert "#accept-nvidia" not in config.read_text()
    converged = config.read_text()
    again = _converge(tmp_path)
    assert "changed=0" in again, again[-3000:]
    assert config.read_text() == converged


def test_missing_keys_go_above_the_first_table(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.write_text('[nvidia-container-runtime]\nmode = "cdi"\n')
    _converge(tmp_path)
    parsed = tomllib.loads(config.read_text())
    assert parsed["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
    assert parsed["nvidia-container-runtime"] == {"mode": "cdi"}


def test_an_operator_may_choose_otherwise(tmp_path: Path) -> None:
    config = _config(tmp_path)
    config.write_text("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n")
    _converge(tmp_path, nvidia_container_toolkit_accept_envvar_unprivileged=True)
    parsed = tomllib.loads(config.read_text())
    assert parsed["accept-nvidia-visible-devices-envvar-when-unprivileged"] is True


def test_a_missing_file_is_created(tmp_path: Path) -> None:
    _converge(tmp_path)
    parsed = tomllib.loads(_config(tmp_path).read_text())
    assert parsed == {
        "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
        "accept-nvidia-visible-devices-as-volume-mounts": False,
    }
