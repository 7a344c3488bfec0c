"""Our DRA and plugin-registration .proto files against the kubelet's own definitions.

The kubelet talks to the plugin by gRPC method path and protobuf field number, so the package,
service, method, message and field names, numbers, types and labels must be exactly upstream's.
Both sides are compiled with grpc_tools' protoc into descriptors and compared; the upstream
files come from the Go module cache (``k8s.io/kubelet``, the version the lab's kubelet is built
from; .ci/setup.d/35-dra-proto.sh downloads it). A last pair of tests mutates a copy of the
upstream file to show that the comparison notices a change.

The registration constants the kubelet checks (the plugin type and the v1 service name in
``supported_versions``) are read from the same module's Go sources.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2
from vslice_node.dra import registration
from vslice_node.dra.api import dra_pb2, pluginregistration_pb2

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
API = SERVICES / "vslice_node" / "dra" / "api"
KUBELET_MODULE = "k8s.io/kubelet@v0.36.3"

# (our file, upstream file inside the kubelet module)
PAIRS = {
    "dra": (API / "dra.proto", "pkg/apis/dra/v1/api.proto"),
    "pluginregistration": (
        API / "pluginregistration.proto",
        "pkg/apis/pluginregistration/v1/api.proto",
    ),
}

Field = tuple[str, int, str, str, str, bool]
Method = tuple[str, str, bool, bool]
Shape = dict[str, object]


def module_cache_candidates() -> Iterator[Path]:
    if os.environ.get("GOMODCACHE"):
        yield Path(os.environ["GOMODCACHE"])
    go = shutil.which("go") or next(
        (str(p) for p in (Path("/usr/local/go/bin/go"),) if p.exists()), None
    )
    if go:
        # GOTOOLCHAIN=local: asking for the cache location must never fetch a toolchain.
        env = {**os.environ, "GOTOOLCHAIN": "local"}
        try:
            found = subprocess.run(
                [go, "env", "GOMODCACHE"], capture_output=True, text=True, timeout=60, env=env
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            found = ""
        if found:
            yield Path(found)
    for gopath in os.environ.get("GOPATH", "").split(os.pathsep):
        if gopath:
            yield Path(gopath) / "pkg" / "mod"
    yield Path.home() / "go" / "pkg" / "mod"


@cache
def kubelet_module() -> Path | None:
    for cache_dir in module_cache_candidates():
        candidate = cache_dir / KUBELET_MODULE
        if (candidate / PAIRS["dra"][1]).is_file():
            return candidate
    return None


@pytest.fixture
def upstream() -> Path:
    module = kubelet_module()
    if module is None:
        # A failure, not a skip: without the upstream files the wire check would silently
        # not run, and a drifted field number would reach the kubelet.
        pytest.fail(
            f"Go module {KUBELET_MODULE} is not in the module cache; "
            "bash .ci/setup downloads it (.ci/setup.d/35-dra-proto.sh)"
        )
    return module


def compile_proto(path: Path, out: Path) -> descriptor_pb2.FileDescriptorProto:
    """The descriptor protoc makes of ``path``, compiled on its own."""
    target = out / f"{path.stem}-{abs(hash(str(path)))}.pb"
    # The well-known types that ship with grpc_tools, in case a file imports one.
    include = importlib.resources.files("grpc_tools") / "_proto"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{path.parent}",
            f"-I{include}",
            f"--descriptor_set_out={target}",
            path.name,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"protoc failed on {path}:\n{result.stderr}"
    files = descriptor_pb2.FileDescriptorSet.FromString(target.read_bytes())
    return files.file[-1]


def message_fields(
    messages: list[descriptor_pb2.DescriptorProto], prefix: str = ""
) -> dict[str, set[Field]]:
    """Every message, nested ones (map entries) included, by its dotted name."""
    found: dict[str, set[Field]] = {}
    for message in messages:
        name = prefix + message.name
        found[name] = {
            (
                f.name,
                f.number,
                descriptor_pb2.FieldDescriptorProto.Label.Name(f.label),
                descriptor_pb2.FieldDescriptorProto.Type.Name(f.type),
                f.type_name,
                f.proto3_optional,
            )
            for f in message.field
        }
        if message.options.map_entry:
            found[name].add(("<map entry>", 0, "", "", "", True))
        found.update(message_fields(list(message.nested_type), name + "."))
    return found


def shape(file: descriptor_pb2.FileDescriptorProto) -> Shape:
    """What the wire depends on: package, messages and their fields, enums, services."""
    services: dict[str, dict[str, Method]] = {
        service.name: {
            m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
            for m in service.method
        }
        for service in file.service
    }
    enums = {e.name: {(v.name, v.number) for v in e.value} for e in file.enum_type}
    return {
        "package": file.package,
        "syntax": file.syntax,
        "messages": message_fields(list(file.message_type)),
        "enums": enums,
        "services": services,
    }


def differences(ours: Shape, theirs: Shape) -> list[str]:
    """Readable differences, empty when the two agree on everything the wire depends on."""
    found = []
    for key in ("package", "syntax"):
        if ours[key] != theirs[key]:
            found.append(f"{key}: ours {ours[key]!r}, upstream {theirs[key]!r}")
    for key in ("messages", "enums", "services"):
        mine, upstream = ours[key], theirs[key]
        assert isinstance(mine, dict) and isinstance(upstream, dict)
        for name in sorted(set(mine) | set(upstream)):
            if name not in mine:
                found.append(f"{key} {name}: missing in ours")
            elif name not in upstream:
                found.append(f"{key} {name}: not upstream")
            elif mine[name] != upstream[name]:
                a, b = mine[name], upstream[name]
                if isinstance(a, set) and isinstance(b, set):
                    found.append(
                        f"{key} {name}: ours only {sorted(a - b)}, upstream only {sorted(b - a)}"
                    )
                else:
                    found.append(f"{key} {name}: ours {a}, upstream {b}")
    return found


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_our_proto_matches_the_kubelets_field_by_field(
    name: str, upstream: Path, tmp_path: Path
) -> None:
    ours_path, upstream_rel = PAIRS[name]
    ours = shape(compile_proto(ours_path, tmp_path))
    theirs = shape(compile_proto(upstream / upstream_rel, tmp_path))
    assert differences(ours, theirs) == []
    # The comparison compared something: the file's services and messages are all there.
    assert ours["services"] and ours["messages"]


@pytest.mark.parametrize(
    ("name", "module"), [("dra", dra_pb2), ("pluginregistration", pluginregistration_pb2)]
)
def test_the_generated_python_is_the_checked_in_proto(
    name: str, module: ModuleType, tmp_path: Path
) -> None:
    # A .proto edited without regenerating would pass the upstream check and still serve the
    # old wire format; the descriptor inside the generated module must be the file's.
    compiled = compile_proto(PAIRS[name][0], tmp_path)
    generated = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(generated)
    assert differences(shape(generated), shape(compiled)) == []


def test_the_method_paths_are_the_ones_the_kubelet_dials() -> None:
    services = {
        s.full_name: [m.name for m in s.methods]
        for s in dra_pb2.DESCRIPTOR.services_by_name.values()
    }
    assert services == {
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin": [
            "NodePrepareResources",
            "NodeUnprepareResources",
        ]
    }
    reg = pluginregistration_pb2.DESCRIPTOR.services_by_name["Registration"]
    assert reg.full_name == "pluginregistration.Registration"


@cache
def go_constant(relative: str, name: str) -> str:
    module = kubelet_module()
    assert module is not None
    text = (module / relative).read_text()
    found = re.search(rf'^\s*{name}\s*=\s*"([^"]*)"', text, re.MULTILINE)
    assert found, f"{name} not found in {KUBELET_MODULE}/{relative}"
    return found.group(1)


def test_registration_announces_what_the_kubelet_accepts(upstream: Path) -> None:
    plugin_type = go_constant("pkg/apis/pluginregistration/v1/constants.go", "DRAPlugin")
    v1_service = go_constant("pkg/apis/dra/v1/types.go", "DRAPluginService")
    assert plugin_type == registration.PLUGIN_TYPE
    # We serve v1 only, so v1 is the one entry, and it must be the kubelet's spelling of it.
    assert (v1_service,) == registration.SUPPORTED_VERSIONS


# -- the check itself can fail -------------------------------------------------------------------


def mutated_copy(source: Path, tmp_path: Path, pattern: str, replacement: str) -> Path:
    text = source.read_text()
    changed, count = re.subn(pattern, replacement, text)
    assert count == 1, f"{pattern!r} matched {count} times in {source}"
    target = tmp_path / "mutated" / source.name
    target.parent.mkdir(exist_ok=True)
    target.write_text(changed)
    return target


@pytest.mark.parametrize(
    ("name", "pattern", "replacement", "expected"),
    [
        ("dra", r"\buid\s*=\s*2;", "uid = 7;", "messages Claim"),
        ("dra", r"optional string share_id", "string share_id", "messages Device"),
        (
            "dra",
            r"\brpc NodeUnprepareResources\b",
            "rpc NodeUnprepareResource",
            "services DRAPlugin",
        ),
        ("dra", r"\bpackage k8s\.io\.kubelet\.pkg\.apis\.dra\.v1;", "package v1;", "package"),
        (
            "pluginregistration",
            r"repeated string supported_versions",
            "string supported_versions",
            "messages PluginInfo",
        ),
        (
            "pluginregistration",
            r"\bbool plugin_registered\b",
            "bool registered",
            "messages RegistrationStatus",
        ),
    ],
)
def test_a_changed_upstream_file_is_noticed(
    name: str, pattern: str, replacement: str, expected: str, upstream: Path, tmp_path: Path
) -> None:
    ours_path, upstream_rel = PAIRS[name]
    changed = mutated_copy(upstream / upstream_rel, tmp_path, pattern, replacement)
    found = differences(
        shape(compile_proto(ours_path, tmp_path)), shape(compile_proto(changed, tmp_path))
    )
    assert any(line.startswith(expected) for line in found), found
