#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt already uses (deb822 or one-line sources), never one
# of our own: VSLICE_DEBIAN_MIRROR when set. Prints nothing when there is none.
set -euo pipefail
if [ -n "${VSLICE_DEBIAN_MIRROR:-}" ]; then
  echo "$VSLICE_DEBIAN_MIRROR"
  exit 0
fi
{ grep -hoE '^[[:space:]]*URIs:[[:space:]]*[^[:space:]]+' /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '{print $2}'
  grep -hoE '^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[^[:space:]]+' /etc/apt/sources.list 2>/dev/null \
    | awk '{print $NF}'
} | grep -v security | head -1 || true
