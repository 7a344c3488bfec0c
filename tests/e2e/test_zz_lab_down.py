"""Last of the lab's tests (the name sorts last): ``down`` leaves nothing of a lab with a real
node behind on the host: no process, mount, network device, sysctl change, cgroup or file
outside the state dir. It stops the session's lab itself (``down`` is idempotent, so the
fixture's own teardown then finds nothing to do) and compares the host with the fingerprint
the fixture took before ``up``.
"""

from __future__ import annotations

from conftest import LabHandle
from hostprint import differences, fingerprint
from vslice_lab import lab as lab_module


def test_down_leaves_nothing_of_the_real_node_on_the_host(lab: LabHandle) -> None:
    assert lab.record.real_nodes, f"the lab has no real node: {lab.record.real_node_note}"
    stopped = lab_module.down(lab.state_dir)
    assert stopped is not None and f"kubelet-{lab.record.real_nodes[0]}" in stopped
    assert differences(lab.host_before, fingerprint()) == []
    assert lab_module.down(lab.state_dir) is None  # a second down finds no lab
