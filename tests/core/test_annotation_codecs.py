import contextlib
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vslice_core import annotations as codec
from vslice_core.errors import DecodeError
from vslice_core.model import Allocation, ContainerAllocation, Gpu, GpuGrant, NodeInventory

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
small = st.integers(min_value=0, max_value=2**40)


@st.composite
def inventories(draw: st.DrawFn) -> NodeInventory:
    uuid_text = st.text(
        st.characters(exclude_categories=["Cs", "Zs", "Cc"]), min_size=1, max_size=12
    )
    uuids = draw(
        st.lists(
            uuid_text.filter(
                lambda u: "," not in u and u.strip() == u and not any(c.isspace() for c in u)
            ),
            unique=True,
            max_size=6,
        )
    )
    gpus = [
        Gpu(
            uuid=uuid,
            model=draw(names),
            memory_mib=draw(st.integers(1, 2**40)),
            cores=draw(st.integers(1, 100)),
            slots=draw(st.integers(1, 64)),
            index=position,
            numa=draw(st.integers(0, 7)),
            healthy=draw(st.booleans()),
            cordoned=draw(st.booleans()),
        )
        for position, uuid in enumerate(uuids)
    ]
    pairs = [(a, b) for i, a in enumerate(uuids) for b in uuids[i + 1 :]]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    topology = {f"{a},{b}": draw(st.integers(0, 1000)) for a, b in chosen}
    return NodeInventory(name=draw(names), gpus=gpus, topology=topology)


grants = st.builds(
    GpuGrant, uuid=names, index=st.integers(0, 64), memory_mib=small, cores=st.integers(0, 100)
)
allocations = st.builds(
    Allocation,
    node=names,
    containers=st.lists(
        st.builds(
            ContainerAllocation, name=names, init=st.booleans(), gpus=st.lists(grants, max_size=4)
        ),
        max_size=4,
    ),
)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


@given(inventories())
def test_node_inventories_round_trip(inventory: NodeInventory) -> None:
    text = codec.encode_node_gpus(inventory)
    assert json.loads(text)["version"] == 1
    assert codec.decode_node_gpus(text, inventory.name) == inventory


@given(allocations)
def test_allocations_round_trip(allocation: Allocation) -> None:
    assert codec.decode_allocation(codec.encode_allocation(allocation)) == allocation


@given(names, st.lists(names, max_size=3), times)
def test_deliveries_round_trip(node: str, containers: list[str], time: datetime) -> None:
    delivery = codec.Delivery(node=node, containers=containers, time=time)
    assert codec.decode_delivered(codec.encode_delivered(delivery)) == delivery


@given(names, times)
def test_node_locks_round_trip(holder: str, expires: datetime) -> None:
    lock = codec.NodeLock(holder=holder, expires=expires)
    decoded = codec.decode_node_lock(codec.encode_node_lock(lock))
    assert decoded == lock
    assert decoded.expired(expires) and not decoded.expired(datetime(1999, 1, 1, tzinfo=UTC))


@given(times)
def test_bind_times_round_trip_to_the_microsecond(moment: datetime) -> None:
    assert codec.decode_bind_time(codec.encode_bind_time(moment)) == moment


def test_a_bind_time_without_a_zone_is_read_as_utc() -> None:
    value = '{"version": 1, "time": "2026-11-30T07:00:00.5"}'
    assert codec.decode_bind_time(value) == datetime(2026, 11, 30, 7, 0, 0, 500000, tzinfo=UTC)


DECODERS = [
    (codec.BIND_TIME, codec.decode_bind_time),
    (codec.ALLOCATION, codec.decode_allocation),
    (codec.DELIVERED, codec.decode_delivered),
    (codec.NODE_LOCK, codec.decode_node_lock),
    (codec.NODE_GPUS, lambda value: codec.decode_node_gpus(value, "node-1")),
]


@pytest.mark.parametrize(("key", "decode"), DECODERS)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not json", "must be a JSON object, got 'not json'"),
        ("[1, 2]", "must be a JSON object, got '[1, 2]'"),
        ("{}", "version must be 1, got None"),
        ('{"version": 2}', "version must be 1, got 2"),
        ('{"version": "1"}', "version must be 1, got '1'"),
        ('{"version": true}', "version must be 1, got True"),
        ("[" * 100000, "must be a JSON object"),
    ],
)
def test_malformed_or_foreign_values_are_rejected_with_the_key(
    key: str, decode: object, value: str, expected: str
) -> None:
    assert callable(decode)
    with pytest.raises(DecodeError) as caught:
        decode(value)
    assert str(caught.value).startswith(key)
    assert expected in str(caught.value)
    assert caught.value.field == key


def test_a_wrong_shape_names_the_place_and_the_value() -> None:
    value = json.dumps(
        {
            "version": 1,
            "node": "n",
            "containers": [
                {"name": "m", "gpus": [{"uuid": "G", "index": 0, "memory_mib": -5, "cores": 1}]}
            ],
        }
    )
    with pytest.raises(
        DecodeError,
        match=r"^vslice.io/allocation: containers.0.gpus.0.memory_mib must be greater than or"
        r" equal to 0, got -5$",
    ):
        codec.decode_allocation(value)
    with pytest.raises(DecodeError, match=r"surprise"):
        codec.decode_allocation(json.dumps({"version": 1, "node": "n", "surprise": 1}))
    duplicate = {
        "version": 1,
        "gpus": [{"uuid": "G", "model": "m", "memory_mib": 1, "slots": 1, "index": 0}] * 2,
    }
    with pytest.raises(DecodeError, match=r"uuid must be unique"):
        codec.decode_node_gpus(json.dumps(duplicate), "n")


@given(st.text(max_size=200))
def test_decoding_arbitrary_text_raises_only_decode_errors(text: str) -> None:
    for _, decode in DECODERS:
        with contextlib.suppress(DecodeError):
            decode(text)
    for hami in (
        lambda: codec.decode_hami_node_register(text, "n"),
        lambda: codec.decode_hami_allocation(text, "n", ["a", "b"]),
    ):
        with contextlib.suppress(DecodeError):
            hami()


def test_hami_node_registrations_decode_to_an_inventory() -> None:
    value = json.dumps(
        [
            {
                "id": "GPU-a",
                "index": 0,
                "count": 10,
                "devmem": 81920,
                "devcore": 100,
                "type": "NVIDIA-A100",
                "numa": 0,
                "mode": "hami-core",
                "health": True,
            },
            {
                "id": "GPU-b",
                "index": 1,
                "count": 10,
                "devmem": 81920,
                "devcore": 100,
                "type": "NVIDIA-A100",
                "numa": 1,
                "mode": "hami-core",
                "health": False,
            },
        ]
    )
    inventory = codec.decode_hami_node_register(value, "node-1")
    assert [
        (g.uuid, g.index, g.slots, g.memory_mib, g.numa, g.healthy) for g in inventory.gpus
    ] == [
        ("GPU-a", 0, 10, 81920, 0, True),
        ("GPU-b", 1, 10, 81920, 1, False),
    ]
    with pytest.raises(DecodeError, match=r"^hami.io/node-nvidia-register must be a JSON array"):
        codec.decode_hami_node_register('{"id": 1}', "node-1")
    with pytest.raises(
        DecodeError,
        match=r"^hami.io/node-nvidia-register: gpus.0.memory_mib must be a valid integer,"
        r" got None$",
    ):
        codec.decode_hami_node_register('[{"id": "x", "type": "t", "count": 1}]', "node-1")


def test_hami_device_allocations_decode_per_container() -> None:
    inventory = NodeInventory(
        name="node-1",
        gpus=[Gpu(uuid="GPU-b", model="m", memory_mib=100, slots=2, index=3)],
    )
    value = "GPU-a,NVIDIA,3000,30:;;GPU-b,NVIDIA,1000,0:GPU-c,NVIDIA,1,0:;"
    allocation = codec.decode_hami_allocation(value, "node-1", ["a", "web", "c"], inventory)
    assert allocation.model_dump() == {
        "node": "node-1",
        "containers": [
            {
                "name": "a",
                "init": False,
                "gpus": [{"uuid": "GPU-a", "index": 0, "memory_mib": 3000, "cores": 30}],
            },
            {
                "name": "c",
                "init": False,
                "gpus": [
                    {"uuid": "GPU-b", "index": 3, "memory_mib": 1000, "cores": 0},
                    {"uuid": "GPU-c", "index": 0, "memory_mib": 1, "cores": 0},
                ],
            },
        ],
    }
    with pytest.raises(DecodeError, match=r"lists 2 containers, the pod has 1"):
        codec.decode_hami_allocation("GPU-a,NVIDIA,1,0:;GPU-b,NVIDIA,1,0:;", "n", ["a"])
    with pytest.raises(DecodeError, match=r"must be 'UUID,TYPE,MEMORY,CORES', got 'GPU-a,1'"):
        codec.decode_hami_allocation("GPU-a,1:;", "n", ["a"])
    with pytest.raises(DecodeError, match=r"cores"):
        codec.decode_hami_allocation("GPU-a,NVIDIA,1,many:;", "n", ["a"])
