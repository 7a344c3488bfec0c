"""The node's GPU inventory annotation: written at once on change, refreshed, backed off."""

from __future__ import annotations

from memory_nodeapi import MemoryNodeApi
from vslice_core import annotations as ann
from vslice_core.model import Gpu, NodeInventory
from vslice_node.gpus.inventory_annotation import InventoryAnnotation

NODE = "n1"


def inventory(healthy: bool = True) -> NodeInventory:
    gpu = Gpu(uuid="GPU-a", model="NVIDIA-L4", memory_mib=23034, slots=4, index=0, healthy=healthy)
    return NodeInventory(name=NODE, gpus=[gpu])


def written(api: MemoryNodeApi) -> NodeInventory | None:
    value = api.node(NODE)["metadata"]["annotations"].get(ann.NODE_GPUS)
    return ann.decode_node_gpus(value, NODE) if value else None


def test_a_change_is_written_at_once_and_an_unchanged_value_only_when_due() -> None:
    api = MemoryNodeApi()
    api.put_node(NODE)
    writer = InventoryAnnotation(api, NODE, every_s=60)
    writer.maybe_write(inventory(), now=0)
    assert written(api) == inventory()
    api.annotate_node(NODE, {ann.NODE_GPUS: None})  # someone removes it
    writer.maybe_write(inventory(), now=30)
    assert written(api) is None  # unchanged for us, not due yet
    writer.maybe_write(inventory(healthy=False), now=31)
    assert written(api) == inventory(healthy=False)  # a change goes out at once
    api.annotate_node(NODE, {ann.NODE_GPUS: None})
    writer.maybe_write(inventory(healthy=False), now=92)
    assert written(api) == inventory(healthy=False)  # due again: healed


def test_failed_writes_back_off_and_a_success_resets_the_state() -> None:
    api = MemoryNodeApi()
    api.put_node(NODE)
    api.failing_writes = True
    writer = InventoryAnnotation(api, NODE, every_s=60)
    writer.maybe_write(inventory(), now=0)
    assert writer.state.startswith("failing: annotate node n1: cannot reach the API server")
    api.failing_writes = False
    writer.maybe_write(inventory(healthy=False), now=0.5)  # in backoff, even for a change
    assert written(api) is None
    writer.maybe_write(inventory(healthy=False), now=1.0)
    assert written(api) == inventory(healthy=False)
    assert writer.state == "written"
