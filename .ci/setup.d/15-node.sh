# What a real lab node takes from the distribution: runc and the CNI plugins (containerd and the
# kubelet themselves are built from Go modules by 30-k8s.sh), iproute2 for the node's bridge,
# busybox-static and the static C library for the images the lab writes itself (no registry).
# Sourced by .ci/setup; idempotent.
node_packages=(runc containernetworking-plugins iptables iproute2 busybox-static libc6-dev util-linux)
node_missing=()
for p in "${node_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || node_missing+=("$p")
done
if [ ${#node_missing[@]} -gt 0 ]; then
  ${SUDO-} apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ${SUDO-} apt-get install -y -qq --no-install-recommends "${node_missing[@]}"
fi
unset node_packages node_missing
