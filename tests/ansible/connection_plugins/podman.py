"""The molecule scenarios' connection: containers.podman's podman, with pipelining.

Molecule's podman driver names the connection ``podman``; this file, on the scenarios' connection
plugin path (molecule/base.yml), takes that name. The collection's plugin runs ``podman exec``
without ``--interactive``, so a module cannot be piped to the host's python and every task costs
five execs (home directory, temporary directory, permissions, the module, cleanup). With the
module on stdin it costs one: most of a scenario's time went to those execs.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible_collections.containers.podman.plugins.connection.podman import (
    Connection as PodmanConnection,
)

DOCUMENTATION = """
    name: podman
    short_description: Run tasks in an existing podman container, one podman exec per task
    description:
      - containers.podman.podman with pipelining, the module piped to the container's python
        on stdin (podman exec --interactive).
    options:
      remote_addr:
        description: The name or ID of the container.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: The user the commands run as inside the container.
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Extra arguments to the podman command line.
        default: ''
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description: The podman executable.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
"""


class Connection(PodmanConnection):  # type: ignore[misc]
    has_pipelining = True

    @ensure_connect  # type: ignore[misc]
    def exec_command(
        self, cmd: str, in_data: bytes | None = None, sudoable: bool = False
    ) -> tuple[int, bytes, bytes]:
        ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
        # Without --interactive podman gives the process no stdin: the piped module would be lost.
        args = ["exec", "--interactive"] if in_data is not None else ["exec"]
        if self.user:
            args += ["--user", self.user]
        result: tuple[int, bytes, bytes] = self._podman(
            args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data
        )
        return result
