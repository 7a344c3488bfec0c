#!/usr/bin/env bash
# Cuts the cluster scenario's hosts off from everything but each other: run on the machine that
# runs the containers, before anything is installed, so that site.yml proves the bundle is all a
# site without internet needs. An apt update, a pip install or an image pull that reaches past
# the hosts is refused at once (REJECT, not DROP: a hidden fetch fails fast and names itself).
#
# What stays reachable, by destination: loopback, the hosts' own network (podman's bridge,
# which the hosts use to reach each other and its gateway), and the pod and service ranges the
# Kubernetes role sets up. The rules go into each host's network namespace (entered with
# nsenter from here: the image carries no iptables), in OUTPUT and FORWARD, so the hosts' own
# processes and their pods are both held to them. kube-proxy and the pod network add their own
# chains in front; neither lets anything out past the allowed ranges.
#
# Usage: airgap.sh cut POD_CIDR SERVICE_CIDR HOST...
#        airgap.sh check URL HOST...
#   check: URL's server (outside the hosts, reachable from this machine: its Debian mirror, say)
#   must be refused from each host's network namespace, whose rules must still end in cut's REJECT.
set -euo pipefail

usage() {
  echo "usage: airgap.sh cut POD_CIDR SERVICE_CIDR HOST... | check URL HOST..." >&2
  exit 2
}
[ $# -ge 3 ] || usage
mode=$1
shift

host_pid() {
  local pid
  pid=$(podman inspect --format '{{.State.Pid}}' "$1")
  if [ -z "$pid" ] || [ "$pid" = 0 ]; then
    echo "airgap: $1 is not running" >&2
    exit 1
  fi
  echo "$pid"
}

# Runs a command of this machine in the network namespace of the host whose pid is in $pid.
in_host() { nsenter --target "$pid" --net -- "$@"; }

# Connects to $1:$2 with a 5 s timeout; prints refused, connected or the error's name.
probe='
import errno, socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("connected")
except OSError as e:
    print("refused" if e.errno == errno.ECONNREFUSED else errno.errorcode.get(e.errno or 0, str(e)))
'

if [ "$mode" = check ]; then
  if [ -z "$1" ]; then
    echo "airgap: check got an empty URL (host-mirror.sh finds none here: set VSLICE_DEBIAN_MIRROR)" >&2
    exit 2
  fi
  # Resolved here: the hosts' namespaces cannot reach this machine's name servers.
  read -r address port < <(python3 - "$1" <<'PY'
import socket, sys, urllib.parse
url = urllib.parse.urlsplit(sys.argv[1])
port = url.port or {"http": 80, "https": 443}[url.scheme]
print(socket.getaddrinfo(url.hostname, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0], port)
PY
  )
  shift
  outside=$(python3 -c "$probe" "$address" "$port")
  if [ "$outside" != connected ]; then
    echo "airgap: $address:$port is not reachable from this machine either ($outside): no proof" >&2
    exit 1
  fi
  for host in "$@"; do
    pid=$(host_pid "$host")
    inside=$(in_host python3 -c "$probe" "$address" "$port")
    last=$(in_host iptables -w -S OUTPUT | tail -1)
    if [ "$inside" != refused ] || [ "$last" != "-A OUTPUT -j REJECT --reject-with icmp-port-unreachable" ]; then
      echo "airgap: from $host, $address:$port: $inside; last OUTPUT rule: $last" >&2
      exit 1
    fi
    echo "airgap: $host is refused $address:$port, which this machine reaches"
  done
  exit 0
fi
[ "$mode" = cut ] || usage
pod_cidr=$1
service_cidr=$2
shift 2

for host in "$@"; do
  pid=$(host_pid "$host")
  subnet=$(in_host ip -4 -o route show dev eth0 scope link | awk '{print $1; exit}')
  if [ -z "$subnet" ]; then
    echo "airgap: $host has no IPv4 network on eth0" >&2
    exit 1
  fi
  # Idempotent: a re-run replaces the rules rather than stacking them.
  for chain in OUTPUT FORWARD; do
    in_host iptables -w -F "$chain"
    for allowed in 127.0.0.0/8 "$subnet" "$pod_cidr" "$service_cidr"; do
      in_host iptables -w -A "$chain" -d "$allowed" -j ACCEPT
    done
    in_host iptables -w -A "$chain" -j REJECT --reject-with icmp-port-unreachable
    in_host ip6tables -w -F "$chain"
    [ "$chain" = OUTPUT ] && in_host ip6tables -w -A OUTPUT -o lo -j ACCEPT
    in_host ip6tables -w -A "$chain" -j REJECT
  done
  echo "airgap: $host may reach only 127.0.0.0/8, $subnet, $pod_cidr and $service_cidr"
done
