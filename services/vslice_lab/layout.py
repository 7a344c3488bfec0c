"""Where everything of one lab lives inside its state directory.

::

    <state>/lab.json                   what runs: ports, pids, options (see ``state``)
    <state>/kubeconfig                 admin kubeconfig (printed as an export line)
    <state>/logs/<component>.log       one log per component
    <state>/pki/                       CA, serving and client certificates, SA signing key
    <state>/config/                    component kubeconfigs and configuration files
    <state>/scheduler.yaml             ``vslice serve scheduler`` settings
    <state>/webhook.yaml               ``vslice serve webhook`` settings

etcd's data lives in a fresh directory per ``up`` (on tmpfs when available, which makes
fsync free for etcd versions without ``--unsafe-no-fsync``); its path is recorded in
``lab.json`` and it is removed by ``down``. A lab is disposable: ``up`` after ``down`` starts
an empty cluster with the same certificates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    """Paths inside one lab's state directory (absolute)."""

    root: Path

    @classmethod
    def at(cls, state_dir: Path | str) -> Layout:
        return cls(Path(state_dir).expanduser().resolve())

    @property
    def record(self) -> Path:
        return self.root / "lab.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def extender_settings(self) -> Path:
        return self.root / "scheduler.yaml"

    @property
    def webhook_settings(self) -> Path:
        return self.root / "webhook.yaml"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def prepare(self) -> None:
        for directory in (self.root, self.logs, self.pki, self.config):
            directory.mkdir(parents=True, exist_ok=True)
