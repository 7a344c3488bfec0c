#!/usr/bin/env bash
# A kubeadm cluster in podman containers on this kind of machine (cgroup v1 host, runc, no
# image registry): one control plane and N-1 nodes, each a Debian 12 container booting systemd
# (build-image.sh), with containerd, the kubelet and kubeadm from the lab's cached builds and
# the control plane's images written locally as OCI archives (imageRepository vslice.local).
# It is the by-hand form of what the `cluster` molecule scenario is to do through the roles, and
# it records what such hosts need (see docs/bringup.md, "Kubernetes in containers"):
#   - `--cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw`: with podman's private cgroup view
#     on a cgroup v1 host, runc inside fails every container with "error mounting cgroup to
#     rootfs at /sys/fs/cgroup: stat /sys/fs/kubepods/...: no such file or directory" (pause
#     sandboxes start; the control-plane containers do not); sharing the host's tree, each
#     kubelet needs its own --cgroup-root;
#   - containerd's `native` snapshotter: overlayfs on the container's own overlay root fails
#     ("failed to mount rootfs component ... fstype: overlay");
#   - `restrict_oom_score_adj = true` (root lacks CAP_SYS_RESOURCE here), cgroupfs, and the
#     kubelet's failCgroupV1: false;
#   - kubeadm's preflight pulls its own pause tag (3.10.x): the pause image is tagged with it;
#   - net.ipv4.ip_forward = 1; no kube-proxy or CoreDNS image: those addon phases are skipped.
# Usage: kubeadm-in-podman.sh up [N]   (default 2 hosts)  |  kubeadm-in-podman.sh down
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="$root/.venv/bin/python"
prefix=vslice-kip
work="${TMPDIR:-/tmp}/$prefix"

down() {
  for c in $(podman ps -a --format '{{.Names}}' | grep "^$prefix-" || true); do
    podman rm -f "$c" >/dev/null
  done
  # The nested kubelets wrote pod cgroups into the host's hierarchy (cgroupns=host): remove the
  # empty directories they left, deepest first.
  for top in /sys/fs/cgroup/*/"$prefix"-*; do
    [ -d "$top" ] && find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$work"
}

if [ "${1:-}" = down ]; then down; exit 0; fi
[ "${1:-}" = up ] || { echo "usage: $0 up [N] | down" >&2; exit 2; }
hosts="${2:-2}"
image="$(bash "$here/build-image.sh")"
down
mkdir -p "$work/images"

# Binaries and images from the lab's cache (built by .ci/setup.d/30-k8s.sh).
eval "$("$py" - "$work/images" <<'PY'
import sys
from pathlib import Path
from vslice_lab import binaries, images
from vslice_build.versions import ETCD_VERSION, KUBERNETES_VERSION
out = Path(sys.argv[1])
bin_dir = binaries.cache_dir(KUBERNETES_VERSION) / "bin"
node = binaries.ensure_node(KUBERNETES_VERSION)
tags = {name: KUBERNETES_VERSION for name in binaries.KUBE_COMPONENTS}
tags["etcd"] = ETCD_VERSION.removeprefix("v") + "-0"
for name, tag in tags.items():
    spec = images.binary_spec(f"vslice.local/{name}:{tag}", bin_dir / name)
    images.write_archive(spec, out / f"{name}.tar")
pause = images.build_pause(out)
images.write_archive(images.pause_spec(pause), out / "pause.tar")
print(f"KUBE_BIN={bin_dir}; CONTAINERD_BIN={node.containerd.parent}; VERSION={KUBERNETES_VERSION}; ETCD_TAG={tags['etcd']}")
PY
)"
for tool in kubeadm kubectl; do
  [ -x "$KUBE_BIN/$tool" ] || { echo "$KUBE_BIN/$tool is missing (build it with the lab's Kubernetes step)" >&2; exit 1; }
done

cat >"$work/config.toml" <<'EOF'
version = 3
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "vslice.local/pause:1"
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = "/usr/sbin/runc"
EOF
cat >"$work/containerd.service" <<'EOF'
[Unit]
Description=containerd
After=network.target
[Service]
ExecStart=/usr/local/bin/containerd
Restart=always
Delegate=yes
KillMode=process
[Install]
WantedBy=multi-user.target
EOF
cat >"$work/kubelet.service" <<'EOF'
[Unit]
Description=kubelet
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=/usr/local/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
Restart=always
RestartSec=2
[Install]
WantedBy=multi-user.target
EOF

host() {  # host INDEX -> prepares one container with the runtime and the kubelet
  local name="$prefix-$1" subnet="10.244.$1.0/24"
  podman run -d --name "$name" --hostname "$name" --privileged --systemd=always --runtime=runc \
    --cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$image" /sbin/init >/dev/null
  for _ in $(seq 30); do podman exec "$name" systemctl is-system-running >/dev/null 2>&1 && break; sleep 1; done
  for f in "$KUBE_BIN"/{kubeadm,kubelet,kubectl} "$CONTAINERD_BIN"/{containerd,containerd-shim-runc-v2,ctr}; do
    podman cp "$f" "$name:/usr/local/bin/"
  done
  podman exec "$name" sh -ec 'apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc containernetworking-plugins conntrack iptables iproute2 ethtool socat kmod >/dev/null'
  podman exec "$name" mkdir -p /etc/containerd /etc/cni/net.d /root/images
  podman cp "$work/config.toml" "$name:/etc/containerd/config.toml"
  podman cp "$work/containerd.service" "$name:/etc/systemd/system/containerd.service"
  podman cp "$work/kubelet.service" "$name:/etc/systemd/system/kubelet.service"
  podman cp "$work/images/." "$name:/root/images/"
  # All kubelets see the host's one cgroup tree: each gets its own root, or each would treat the
  # others' pod cgroups as orphans and kill them.
  podman exec "$name" sh -ec "for c in /sys/fs/cgroup/*/; do mkdir -p \"\${c}$name\" 2>/dev/null || true; done
    echo KUBELET_EXTRA_ARGS=--cgroup-root=/$name >/etc/default/kubelet"
  printf '{"cniVersion":"1.0.0","name":"vslice-bridge","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"%s"}]],"routes":[{"dst":"0.0.0.0/0"}]}},{"type":"portmap","capabilities":{"portMappings":true}}]}\n' "$subnet" \
    | podman exec -i "$name" sh -c 'cat >/etc/cni/net.d/10-vslice-bridge.conflist'
  podman exec "$name" sh -ec '
    systemctl daemon-reload; systemctl enable --now containerd >/dev/null 2>&1
    for _ in $(seq 20); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
    for archive in /root/images/*.tar; do ctr -n k8s.io images import "$archive" >/dev/null 2>&1; done
    echo 1 >/proc/sys/net/ipv4/ip_forward
    systemctl enable kubelet >/dev/null 2>&1'
}

started=$(date +%s)
host 0
cp_ip="$(podman exec "$prefix-0" hostname -I | awk '{print $1}')"
pause_tag="$(podman exec "$prefix-0" kubeadm config images list --kubernetes-version "$VERSION" 2>/dev/null | sed -n 's#.*/pause:##p')"
podman exec "$prefix-0" ctr -n k8s.io images tag vslice.local/pause:1 "vslice.local/pause:$pause_tag" >/dev/null
podman exec -i "$prefix-0" sh -c 'cat >/root/kubeadm.yaml' <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint: {advertiseAddress: $cp_ip}
nodeRegistration:
  criSocket: unix:///run/containerd/containerd.sock
  ignorePreflightErrors: [SystemVerification, Swap, FileContent--proc-sys-net-bridge-bridge-nf-call-iptables]
skipPhases: [addon/kube-proxy, addon/coredns]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $VERSION
imageRepository: vslice.local
etcd: {local: {imageTag: $ETCD_TAG}}
networking: {podSubnet: 10.244.0.0/16, serviceSubnet: 10.96.0.0/12}
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
EOF
podman exec "$prefix-0" kubeadm init --config /root/kubeadm.yaml >"$work/init.log" 2>&1 \
  || { tail -20 "$work/init.log" >&2; exit 1; }
join="$(podman exec "$prefix-0" kubeadm token create --ttl 1h --print-join-command | tail -1)"
for i in $(seq 1 $((hosts - 1))); do
  host "$i"
  podman exec "$prefix-$i" sh -c "$join --ignore-preflight-errors=SystemVerification,FileContent--proc-sys-net-bridge-bridge-nf-call-iptables" >"$work/join-$i.log" 2>&1 \
    || { tail -20 "$work/join-$i.log" >&2; exit 1; }
done
podman exec "$prefix-0" sh -c "KUBECONFIG=/etc/kubernetes/admin.conf kubectl wait --for=condition=Ready node --all --timeout=180s >/dev/null"
podman exec "$prefix-0" sh -c "KUBECONFIG=/etc/kubernetes/admin.conf kubectl get nodes -o wide"
echo "kubeadm-in-podman: $hosts hosts Ready in $(( $(date +%s) - started )) s" >&2
