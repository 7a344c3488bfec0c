"""A fake GPU that fails: an Xid written to FAKE_NVML_XID_FILE reaches NVML's event set, the
node agent's NVML backend (through NVIDIA's own pynvml) marks the GPU unhealthy, and the
ResourceSlice device the agent would publish for it carries the NoExecute taint
(vslice_core.dra.taints). An application's Xid leaves the GPU healthy."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import Probe

UUIDS = ["GPU-0a000000-0000-4000-8000-000000000000", "GPU-0a000000-0000-4000-8000-000000000001"]
NODE = ";".join(f"{uuid},NVIDIA-L4,24g" for uuid in UUIDS)

AGENT = textwrap.dedent(
    """
    import json, sys
    from vslice_core.dra.devices import resource_slice
    from vslice_node.gpus.backends.nvml import NvmlBackend

    backend = NvmlBackend("node-a", slots=4)
    print("ready", flush=True)
    sys.stdin.readline()  # the test has written the two Xids
    for _ in range(2):
        backend.wait_for_change(5.0)  # returns after one event
    published = resource_slice(backend.inventory(), generation=1)
    print(json.dumps({
        "healthy": [g.healthy for g in backend.inventory().gpus],
        "taints": [d.get("taints", []) for d in published["spec"]["devices"]],
    }))
    backend.close()
    """
)


def test_an_xid_from_the_fake_driver_makes_the_gpu_unhealthy_and_tainted(
    probe: Probe, tmp_path: Path
) -> None:
    xids = tmp_path / "xids"
    xids.write_text("")
    env = probe.env(False, FAKE_NVIDIA_GPUS=NODE, FAKE_NVML_XID_FILE=str(xids))
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert agent.stdout is not None and agent.stdin is not None
    assert agent.stdout.readline().strip() == "ready", agent.stderr.read() if agent.stderr else ""
    with xids.open("a") as out:  # an application's fault on GPU 0, a fallen-off-the-bus on 1
        out.write(f"{UUIDS[0]} 13\n{UUIDS[1]} 79\n")
    agent.stdin.write("go\n")
    agent.stdin.flush()
    output, errors = agent.communicate(timeout=60)
    assert agent.returncode == 0, errors
    report = json.loads(output.strip().splitlines()[-1])
    assert report["healthy"] == [True, False]
    assert report["taints"] == [[], [{"key": "gpu.vslice.io/unhealthy", "effect": "NoExecute"}]]


def test_without_the_file_a_wait_times_out_as_on_a_healthy_card(probe: Probe) -> None:
    script = textwrap.dedent(
        """
        import time, pynvml
        pynvml.nvmlInit()
        events = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(
            pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, events)
        start = time.monotonic()
        try:
            pynvml.nvmlEventSetWait(events, 300)
        except pynvml.NVMLError_Timeout:
            print(time.monotonic() - start)
        """
    )
    env = probe.env(False, FAKE_NVIDIA_GPUS=NODE)
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip(), result.stderr  # it timed out (a delivered event prints none)
    assert 0.3 <= float(result.stdout) < 2.0  # after its timeout, not at once and not hanging
