"""Configuration of a real GPU node of the lab: containerd, a kubelet, and vslice's device plugin
and monitor, with the fake driver standing in for the GPUs the inventory lists.

Everything that can be pointed somewhere lives in ``<state>/nodes/<name>/`` (:class:`NodeLayout`):
containerd's root, state, sockets, runc root, network namespaces and CDI specs; the CNI
configuration and IPAM data; the kubelet's root, pod logs, certificates and configuration; the
device nodes that stand in for ``/dev/nvidia*``; the shim regions. The rest (sysctls, the
kubelet's fixed device-plugin directory, ``/var/log/containers``, cgroups, the bridge) is
recorded and undone by :mod:`vslice_lab.hostchanges`.

The settings follow what a kubelet needs on these hosts (cgroup v1, no systemd as PID 1, root
without CAP_SYS_RESOURCE): ``cgroupfs``, ``failCgroupV1: false``, no swap check, no node
allocatable enforcement, no iptables chains, no eviction, containerd's
``restrict_oom_score_adj``. The node's address is patched to ``127.0.0.1`` once it registers
(the kubelet refuses a loopback ``--node-ip`` and then never overwrites the address), so the
API server reaches the kubelet (logs, exec) on loopback with its own client certificate and
verifies the kubelet's serving certificate against the lab CA.

Only one real node can run per machine: the kubelet's device-plugin directory is a fixed path.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from vslice_build.binaries import NodeBinaries
from vslice_core.model import NodeInventory

from vslice_lab.components import Component
from vslice_lab.health import Probe
from vslice_lab.pki import KeyPair
from vslice_lab.ports import HOST

DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
REAL_NODE_LABEL = "vslice.io/real-node"
BRIDGE = "vslice-lab0"
POD_SUBNET = "10.244.250.0/24"
"""Pod addresses stay on this host's bridge: no gateway, no masquerading, no routes out."""
MAX_SOCKET_PATH = 107  # sockaddr_un.sun_path, less the terminating NUL
NVIDIA_MAJOR = 195
UVM_MAJOR = 510
CONTAINER_FAKE_STATE = "/run/vslice-fake/state"
CONTROL_NODES = {"nvidiactl": (NVIDIA_MAJOR, 255), "nvidia-uvm": (UVM_MAJOR, 0)}
CONTROL_NODES["nvidia-uvm-tools"] = (UVM_MAJOR, 1)


@dataclass(frozen=True)
class ShimBuild:
    """What ``make -C shim`` produced and a real node mounts into GPU containers."""

    directory: Path

    @property
    def library(self) -> Path:
        return self.directory / "libvslice.so"

    @property
    def driver_libraries(self) -> list[Path]:
        return [
            self.directory / "fake" / "libcuda.so.1",
            self.directory / "fake" / "libnvidia-ml.so.1",
        ]

    @property
    def smoke(self) -> Path:
        return self.directory / "smoke" / "vslice-smoke"

    @property
    def memory_limit_hook(self) -> Path:
        """``vslice-memory-limit``: sets a container's driver-enforced limit (docs/shim.md)."""
        return self.directory / "hook" / "vslice-memory-limit"

    def missing(self) -> list[Path]:
        wanted = (self.library, *self.driver_libraries, self.smoke, self.memory_limit_hook)
        return [p for p in wanted if not p.is_file()]


def default_shim_build() -> Path:
    """``$VSLICE_SHIM_BUILD``, else this checkout's ``shim/build`` (editable installs)."""
    configured = os.environ.get("VSLICE_SHIM_BUILD")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / "shim" / "build"


@dataclass(frozen=True)
class NodeLayout:
    """Paths of one real node below the lab's state directory."""

    root: Path

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def run_dir(self) -> Path:
        """containerd's sockets and the runc shims' socket directory. Unix socket paths are
        short (containerd refuses a shim socket directory over 42 characters and socket paths
        over 104), which a state dir below a test's temporary directory easily exceeds, so they
        live in a short per-node directory under /run, named after the node directory and
        removed by ``down``."""
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:10]
        return Path("/run") / f"vslice-lab-{digest}"

    @property
    def shim_sockets(self) -> Path:
        return self.run_dir / "s"

    @property
    def containerd_socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def containerd_debug_socket(self) -> Path:
        """containerd's debug server (``/debug/pprof``, expvar): a root-only unix socket in
        the node's run directory, for profiling what containerd does per pod
        (benchmarks/pod_startup.py ``--profile``)."""
        return self.run_dir / "containerd-debug.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def runc_root(self) -> Path:
        return self.root / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"

    @property
    def dev_dir(self) -> Path:
        return self.root / "dev"

    @property
    def cache_root(self) -> Path:
        return self.root / "regions"

    @property
    def limits_root(self) -> Path:
        """The device plugin's limits files, apart from the writable region directories."""
        return self.root / "limits"

    @property
    def fake_state(self) -> Path:
        return self.root / "fake-gpu-state"

    @property
    def gpus_file(self) -> Path:
        """The node agent's static inventory: a copy of the lab's, written at ``up``. Setting a
        GPU's ``healthy: false`` or ``cordoned: true`` here is how a lab GPU fails or is
        cordoned (the agent re-reads the file within a second); the repository's file stays
        as it is."""
        return self.root / "gpus.yaml"

    @property
    def preload_file(self) -> Path:
        return self.root / "ld.so.preload"

    @property
    def pod_resources_socket(self) -> Path:
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    def settings(self, service: str) -> Path:
        return self.root / f"{service}.yaml"

    @property
    def plugins_registry(self) -> Path:
        """The kubelet's plugin registration directory (``<root-dir>/plugins_registry``)."""
        return self.kubelet_root / "plugins_registry"

    def long_sockets(self) -> list[str]:
        """Sockets below the kubelet's root dir whose paths would be too long (the longest
        name in the registry is the DRA driver's registration socket)."""
        paths = [self.pod_resources_socket, self.plugins_registry / "gpu.vslice.io-reg.sock"]
        return [str(p) for p in paths if len(str(p)) > MAX_SOCKET_PATH]

    def prepare(self) -> None:
        for directory in (
            self.run_dir,
            self.root,
            self.containerd_root,
            self.containerd_state,
            self.runc_root,
            self.cni_conf_dir,
            self.cni_data_dir,
            self.cdi_dir,
            self.kubelet_root,
            self.pod_logs,
            self.dev_dir,
            self.cache_root,
        ):
            directory.mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class NodePorts:
    kubelet: int
    kubelet_healthz: int
    device_plugin: int
    monitor: int


def preflight(shim: ShimBuild) -> str | None:
    """Why a real node cannot run on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "a real node needs root (containerd and the kubelet manage mounts and cgroups)"
    memory = Path("/sys/fs/cgroup/memory")
    target = memory if memory.is_dir() else Path("/sys/fs/cgroup")
    if not os.access(target, os.W_OK):
        return f"a real node needs write access to cgroups ({target} is not writable)"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "a real node needs the overlay filesystem (containerd's snapshotter)"
    missing = shim.missing()
    if missing:
        return f"{missing[0]} is missing: build the shim with `make -C shim`"
    socket_path = DEVICE_PLUGIN_DIR / "kubelet.sock"
    if socket_path.exists() and _answers(socket_path):
        return f"another kubelet already serves {socket_path} on this machine"
    return None


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


# -- configuration files ---------------------------------------------------------------------


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def containerd_config(layout: NodeLayout, binaries: NodeBinaries, sandbox_image: str) -> str:
    """containerd 2 configuration (schema version 4). Every path containerd would otherwise
    take from /var, /run, /opt or /etc points below the node's directory; nothing is
    imported from /etc/containerd; NRI is off (no plugins here)."""
    q = _toml_string
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    state = layout.containerd_state
    return f"""\
# Written by `vslice lab up` for one real node; everything lives below the lab's state dir.
version = 4
root = {q(str(layout.containerd_root))}
state = {q(str(state))}
imports = []
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[debug]
  level = "info"

[plugins.'io.containerd.server.v1.grpc']
  address = {q(str(layout.containerd_socket))}

[plugins.'io.containerd.server.v1.ttrpc']
  address = {q(str(layout.containerd_socket) + ".ttrpc")}

[plugins.'io.containerd.server.v1.debug']
  address = {q(str(layout.containerd_debug_socket))}

[plugins.'io.containerd.internal.v1.opt']
  path = {q(str(layout.root / "containerd" / "opt"))}

[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = {q(str(layout.root / "containerd" / "image-verifier"))}

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = {q(str(layout.shim_sockets))}

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {q(sandbox_image)}

[{cri}]
  cdi_spec_dirs = [{q(str(layout.cdi_dir))}]
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails to start.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = {q(str(binaries.runc))}
        Root = {q(str(layout.runc_root))}
        SystemdCgroup = false
  [{cri}.cni]
    bin_dirs = [{q(str(binaries.cni_bin_dir))}]
    conf_dir = {q(str(layout.cni_conf_dir))}
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_config(layout: NodeLayout) -> dict[str, Any]:
    """A bridge network that stays on this host (a conflist must exist for the node to be
    Ready, even for pods that never use the network)."""
    return {
        "cniVersion": "1.0.0",
        "name": "vslice-lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "dataDir": str(layout.cni_data_dir),
                },
            }
        ],
    }


def kubelet_config(
    layout: NodeLayout, ports: NodePorts, ca: Path, serving: KeyPair
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": HOST,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": HOST,
        "healthzPort": ports.kubelet_healthz,
        "tlsCertFile": str(serving.cert),
        "tlsPrivateKeyFile": str(serving.key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "enforceNodeAllocatable": [],
        "makeIPTablesUtilChains": False,
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "resolvConf": str(layout.resolv_conf),
        "podLogsDir": str(layout.pod_logs),
        "serializeImagePulls": False,
        "registerNode": True,
        "maxPods": 110,
        "clusterDomain": "cluster.local",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "nodeStatusUpdateFrequency": "10s",
        "shutdownGracePeriod": "0s",
    }


def fake_gpus(inventory: NodeInventory) -> str:
    """The fake driver's ``FAKE_NVIDIA_GPUS``: ``UUID,MODEL,MEMORY`` per GPU, by index."""
    gpus = sorted(inventory.gpus, key=lambda gpu: gpu.index)
    return ";".join(f"{gpu.uuid},{gpu.model},{gpu.memory_mib}m" for gpu in gpus)


def make_device_nodes(layout: NodeLayout, inventory: NodeInventory) -> None:
    """Character devices standing in for ``/dev/nvidia*`` (no driver behind them: the
    runtime only checks that they exist and reads their numbers)."""
    wanted = {f"nvidia{gpu.index}": (NVIDIA_MAJOR, gpu.index) for gpu in inventory.gpus}
    wanted.update(CONTROL_NODES)
    for name, (major, minor) in wanted.items():
        path = layout.dev_dir / name
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def write_configs(
    layout: NodeLayout,
    binaries: NodeBinaries,
    ports: NodePorts,
    ca: Path,
    serving: KeyPair,
    sandbox_image: str,
) -> None:
    layout.prepare()
    layout.containerd_config.write_text(containerd_config(layout, binaries, sandbox_image))
    (layout.cni_conf_dir / "10-vslice-lab.conflist").write_text(
        json.dumps(cni_config(layout), indent=1) + "\n"
    )
    layout.kubelet_config.write_text(
        yaml.safe_dump(kubelet_config(layout, ports, ca, serving), sort_keys=False)
    )
    # No DNS for lab pods: an empty resolver keeps the host's configuration out of them.
    layout.resolv_conf.write_text("options ndots:1\n")
    # The fake driver's shared state, bind-mounted into every GPU container: it must exist.
    layout.fake_state.touch()
    layout.fake_state.chmod(0o666)


def device_plugin_settings(
    name: str,
    layout: NodeLayout,
    inventory_file: Path,
    inventory: NodeInventory,
    shim: ShimBuild,
    admin: Path,
    port: int,
    allocation_keys: Path | None = None,
    dra_gpus: list[int] | None = None,
) -> dict[str, Any]:
    """The device plugin's settings; with ``allocation_keys`` (the lab's proof key file, the
    extender's) it refuses allocations without a valid proof, as on a production node. With
    ``dra_gpus`` the node agent also serves those GPUs on the DRA path; its registration
    socket goes in the kubelet's plugin registry, its DRA socket in the node's short run
    directory (socket paths are short)."""
    dra: dict[str, Any] = {}
    if dra_gpus:
        dra = {
            "dra": True,
            "dra_gpus": dra_gpus,
            "kubelet_plugins_registry": str(layout.plugins_registry),
            "kubelet_plugins_dir": str(layout.kubelet_root / "plugins"),
            "dra_socket": str(layout.run_dir / "dra.sock"),
        }
    return {
        **dra,
        "node_name": name,
        "kubeconfig": str(admin),
        "listen": f"{HOST}:{port}",
        "backend": "static",
        "inventory": str(inventory_file),
        "device_plugin_dir": str(DEVICE_PLUGIN_DIR),
        "pod_resources_socket": str(layout.pod_resources_socket),
        "cache_root": str(layout.cache_root),
        "limits_root": str(layout.limits_root),
        "allocation_key_file": str(allocation_keys) if allocation_keys else "",
        "shim_library": str(shim.library),
        "preload_file": str(layout.preload_file),
        "injection": "cdi",
        "cdi_spec_dir": str(layout.cdi_dir),
        "host_dev_dir": str(layout.dev_dir),
        "driver_libraries": [str(p) for p in shim.driver_libraries],
        "driver_env": {
            "FAKE_NVIDIA_GPUS": fake_gpus(inventory),
            "FAKE_CUDA_STATE": CONTAINER_FAKE_STATE,
        },
        "driver_mounts": [
            {
                "host_path": str(layout.fake_state),
                "container_path": CONTAINER_FAKE_STATE,
                "read_only": False,
            }
        ],
        # The driver-enforced memory backend: auto keeps the shim on this cgroup v1 host; a
        # test sets memory_backend driver, which the fake driver enforces by cgroup path.
        "memory_limit_hook": str(shim.memory_limit_hook),
        "driver_nvml_library": str(shim.driver_libraries[1]),
        "driver_host_env": {
            "FAKE_NVIDIA_GPUS": fake_gpus(inventory),
            "FAKE_CUDA_STATE": str(layout.fake_state),
        },
    }


def monitor_settings(name: str, layout: NodeLayout, admin: Path, port: int) -> dict[str, Any]:
    return {
        "node_name": name,
        "kubeconfig": str(admin),
        "listen": f"{HOST}:{port}",
        "cache_root": str(layout.cache_root),
        "limits_root": str(layout.limits_root),
        # Idle slices within seconds, so the lab's tests of idle reclaim take seconds too; a
        # namespace still opts in with its own label (docs/idle.md).
        "idle_after_seconds": 5,
        "idle_check_every_seconds": 1,
        "pod_names_every_seconds": 2,
        "dra_checkpoint": str(
            layout.kubelet_root / "plugins" / "gpu.vslice.io" / "checkpoint.json"
        ),
    }


# -- components ------------------------------------------------------------------------------


def containerd(name: str, layout: NodeLayout, binaries: NodeBinaries) -> Component:
    argv = [str(binaries.containerd), "--config", str(layout.containerd_config)]
    # The shim and runc are found on PATH: put the cached shim first.
    env = {"PATH": f"{binaries.containerd_shim.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    probe = Probe(f"cri://{layout.containerd_socket}")
    return Component(f"containerd-{name}", argv, probe, env)


def kubelet(name: str, layout: NodeLayout, binaries: NodeBinaries, ports: NodePorts) -> Component:
    argv = [
        str(binaries.kubelet),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubelet_kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--hostname-override={name}",
        # Refused as loopback, which keeps the kubelet from writing an address the API server
        # cannot reach; the lab patches InternalIP 127.0.0.1 in once the node registers.
        f"--node-ip={HOST}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        "--v=2",
    ]
    probe = Probe(f"http://{HOST}:{ports.kubelet_healthz}/healthz")
    return Component(f"kubelet-{name}", argv, probe, port=ports.kubelet_healthz)


def node_service(service: str, name: str, settings: Path, port: int) -> Component:
    argv = [sys.executable, "-m", "vslice.cli", "serve", service, "--config", str(settings)]
    probe = Probe(f"http://{HOST}:{port}/healthz")
    return Component(f"{service}-{name}", argv, probe, {"PYTHONUNBUFFERED": "1"}, port)
