"""GetPreferredAllocation: which of the free device IDs the kubelet should take.

The kubelet counts slots per node, vslice per GPU. Steering the kubelet to slots on the GPUs
the extender actually granted keeps the two counts in step, so the kubelet never believes a
GPU is full while vslice still has room on it (or the reverse). When no pending allocation is
known the choice spreads over distinct GPUs, lowest slot first, so it is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from vslice_node.deviceplugin.devices import parse_device_id


def preferred_ids(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    target_uuids: Sequence[str] = (),
) -> list[str]:
    """``size`` IDs out of ``available``: ``must_include`` first, then one per target GPU."""
    chosen = list(dict.fromkeys(must_include))[:size]
    free = [device_id for device_id in available if device_id not in chosen]
    parsed = {device_id: parse_device_id(device_id) for device_id in free}
    for uuid in target_uuids:
        if len(chosen) >= size or any(parse_device_id(c)[0] == uuid for c in chosen):
            continue
        on_gpu = sorted((d for d in free if parsed[d][0] == uuid), key=lambda d: parsed[d][1])
        if on_gpu:
            chosen.append(on_gpu[0])
            free.remove(on_gpu[0])
    while len(chosen) < size and free:
        used = [parse_device_id(c)[0] for c in chosen]
        best = min(free, key=lambda d: (used.count(parsed[d][0]), parsed[d][1], d))
        chosen.append(best)
        free.remove(best)
    return chosen
