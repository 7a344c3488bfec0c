#!/bin/sh
# Stand-in for nvidia-ctk (packaged by fake-nvidia-debs.sh): `cdi generate` and `cdi list` for
# the GPUs whose /dev/nvidia<N> device nodes exist, as the real tool lists the GPUs the driver
# knows (index names and "all"); one GPU, "0", on a host without any node.
set -e
if [ "$1 $2" = "cdi generate" ]; then
  out=/dev/stdout
  for a in "$@"; do
    case "$a" in --output=*) out="${a#--output=}" ;; esac
  done
  indices=$(for d in /dev/nvidia[0-9]*; do [ -c "$d" ] && echo "${d#/dev/nvidia}"; done | sort -n)
  [ -n "$indices" ] || indices=0
  {
    echo '---'
    echo 'cdiVersion: 0.5.0'
    echo 'kind: nvidia.com/gpu'
    echo 'devices:'
    for i in $indices; do
      printf -- '- name: "%s"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia%s\n' "$i" "$i"
    done
    echo '- name: all'
    echo '  containerEdits:'
    echo '    deviceNodes:'
    for i in $indices; do echo "    - path: /dev/nvidia$i"; done
    echo 'containerEdits:'
    echo '  deviceNodes:'
    echo '  - path: /dev/nvidiactl'
  } >"$out"
  exit 0
fi
if [ "$1 $2" = "cdi list" ]; then
  for f in /etc/cdi/*.yaml /var/run/cdi/*.yaml; do
    [ -f "$f" ] || continue
    grep -q '^kind: nvidia.com/gpu' "$f" || continue
    sed -n 's/^- name: "\{0,1\}\([^"]*\)"\{0,1\}$/nvidia.com\/gpu=\1/p' "$f"
  done
  exit 0
fi
echo "nvidia-ctk stand-in: unsupported: $*" >&2
exit 1
