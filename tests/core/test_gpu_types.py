"""GPU type selectors match whole words of the model, the same on every path: the engine
(extender, ``vslice plan``, SDK), the DRA path's CEL selectors, and the exclude list."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from core_builders import A100, T4, container, gpu, ledger, node, request
from hypothesis import given, settings
from hypothesis import strategies as st
from vslice_core.dra import DRIVER
from vslice_core.dra.claims import claim_spec, request_of, selectors
from vslice_core.errors import InvalidRequest
from vslice_core.gputypes import cel_pattern, type_matches, wanted_of_pattern
from vslice_core.model import ContainerRequest, PodRequest

A10 = "NVIDIA A10"
H100_SXM = "NVIDIA-H100-SXM"
MODELS = (A100, A10, T4, "NVIDIA L4", "NVIDIA-L40S", H100_SXM, "NVIDIA GeForce RTX 4090")

# (wanted, models it matches): the rule as users read it.
CASES = [
    ("a10", {A10}),
    ("A10", {A10}),
    ("A100", {A100}),
    ("a100-sxm4", {A100}),
    ("A100 SXM4 80GB", {A100}),
    ("nvidia", set(MODELS) - {T4}),
    ("t4", {T4}),
    ("tesla", {T4}),
    ("l4", {"NVIDIA L4"}),
    ("SXM", {H100_SXM}),
    ("sxm4-8", set()),
    ("rtx-4090", {"NVIDIA GeForce RTX 4090"}),
    ("80gb", {A100}),
    ("v100", set()),
]

CHECKER_SOURCE = Path(__file__).parent / "cel_check"


@pytest.mark.parametrize(("wanted", "models"), CASES)
def test_a_wanted_type_matches_the_models_whose_words_it_names(
    wanted: str, models: set[str]
) -> None:
    assert {model for model in MODELS if type_matches(wanted, model)} == models


def test_a_pod_asking_for_an_a10_is_not_placed_on_an_a100() -> None:
    book = ledger(
        node("node-a100", gpu("A0", model=A100)),
        node("node-a10", gpu("B0", model=A10, memory_mib=23028)),
    )
    pod = request(container(mem=8192), annotations={"nvidia.com/use-gputype": "A10"})
    decision = book.decide(pod, explain=True)
    assert decision.node == "node-a10"
    assert decision.nodes["node-a100"].reasons == {"type_mismatch": 1}


def test_excluding_a10_keeps_the_a100s_usable() -> None:
    book = ledger(
        node("node-a10", gpu("B0", model=A10, memory_mib=23028)),
        node("node-a100", gpu("A0", model=A100)),
    )
    pod = request(container(mem=8192), annotations={"nvidia.com/nouse-gputype": "a10"})
    decision = book.decide(pod, explain=True)
    assert decision.nodes["node-a100"].fits
    assert decision.nodes["node-a10"].reasons == {"type_mismatch": 1}


def test_hamis_comma_list_of_models_is_read_as_it_was() -> None:
    pod = request(container(mem=1024), annotations={"nvidia.com/use-gputype": "A100, V100"})
    assert pod.gpu_types == ["a100", "v100"]
    book = ledger(node("node-a100", gpu("A0", model=A100)), node("node-t4", gpu("T0", model=T4)))
    assert book.decide(pod).node == "node-a100"


def test_a_type_without_a_letter_or_digit_is_refused_with_the_annotation() -> None:
    with pytest.raises(InvalidRequest) as caught:
        request(container(mem=1024), annotations={"vslice.io/gpu-type": "a100,-"})
    assert str(caught.value) == (
        "vslice.io/gpu-type must be a comma list of GPU models with a letter or digit each, "
        "such as 'A100,L4', got 'a100,-'"
    )


def test_a_suggestion_names_the_model_as_the_cluster_spells_it() -> None:
    book = ledger(
        node("node-a100", gpu("A0", model=A100)),
        node("node-t4", gpu("T0", model=T4, memory_mib=15360)),
    )
    pod = request(container(mem=20 * 1024), annotations={"vslice.io/gpu-type": "t4"})
    decision = book.decide(pod, explain=True, suggest=True)
    assert [s.gpu_model for s in decision.suggestions if s.change == "other_type"] == [A100]


def _pod(types: list[str], excluded: list[str] | None = None) -> PodRequest:
    return PodRequest(
        containers=[ContainerRequest(name="c", gpus=1, memory_mib=1, cores=0)],
        gpu_types=types,
        gpu_types_exclude=excluded or [],
    )


def test_the_dra_selector_is_read_back_as_the_same_filters() -> None:
    asked = _pod(["a100-sxm4", "l4"], ["a10"])
    read, notes = request_of({"spec": claim_spec(asked)}, "team", "p")
    assert notes == []
    assert (read.gpu_types, read.gpu_types_exclude) == (["a100 sxm4", "l4"], ["a10"])
    for model in MODELS:
        assert book_allows(read, model) == book_allows(asked, model), model


def book_allows(pod: PodRequest, model: str) -> bool:
    book = ledger(node("n", gpu("G0", model=model)))
    return book.decide(pod, explain=True).fits


def test_a_substring_selector_of_an_older_webhook_is_noted_not_judged() -> None:
    legacy = f'device.attributes["{DRIVER}"].model.lowerAscii().contains("a10")'
    spec = claim_spec(_pod([]))
    spec["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": legacy}}]
    read, notes = request_of({"spec": spec})
    assert read.gpu_types == []
    assert notes == [f"request c: selector {legacy!r} is not judged by the plan"]


names = st.lists(
    st.text(alphabet="aA1 -_./xX0sSmM4é", min_size=1, max_size=5), min_size=1, max_size=4
).map("-".join)


@given(names, names)
@settings(max_examples=400, deadline=None)
def test_the_cel_pattern_matches_exactly_what_the_engine_matches(wanted: str, model: str) -> None:
    if not re.search("[a-z0-9]", wanted, re.IGNORECASE):
        return
    pattern = cel_pattern(wanted)
    # CEL's lowerAscii lowers A-Z only; RE2 and Python agree on this pattern's syntax.
    lowered = model.translate(
        str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
    )
    assert (re.search(pattern, lowered) is not None) == type_matches(wanted, model)
    assert wanted_of_pattern(pattern) is not None
    assert type_matches(wanted_of_pattern(pattern) or "", model) == type_matches(wanted, model)


def test_any_other_pattern_is_not_taken_for_a_type() -> None:
    assert wanted_of_pattern("a10") is None
    assert wanted_of_pattern("(^|[^a-z0-9])a.10($|[^a-z0-9])") is None


@pytest.fixture(scope="module")
def cel_check() -> Path:
    """The Go checker in cel_check/, built once per source version (cached)."""
    go = shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go",) if Path(p).exists()), None
    )
    if go is None:
        pytest.fail("this test needs the Go toolchain (go) to build tests/core/cel_check")
    source = b"".join(
        (CHECKER_SOURCE / name).read_bytes() for name in ("main.go", "go.mod", "go.sum")
    )
    version = hashlib.sha256(source).hexdigest()[:12]
    binary = Path.home() / ".cache" / "vslice" / "cel-check" / version / "cel-check"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [go, "build", "-buildvcs=false", "-o", str(binary), "."],
            cwd=CHECKER_SOURCE,
            check=True,
            timeout=600,
        )
    return binary


def _kubernetes_answers(
    checker: Path, expressions: list[tuple[str, str]]
) -> list[dict[str, object]]:
    lines = "".join(
        json.dumps({"driver": DRIVER, "expression": e, "model": m}) + "\n" for e, m in expressions
    )
    done = subprocess.run(
        [str(checker)], input=lines, capture_output=True, text=True, check=True, timeout=60
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_kubernetes_cel_selects_the_gpus_the_engine_selects(cel_check: Path) -> None:
    asked = [(_pod([wanted]), model) for wanted, _ in CASES for model in MODELS] + [
        (_pod([], [wanted]), model) for wanted, _ in CASES for model in MODELS
    ]
    queries = []
    for pod, model in asked:
        for selector in selectors(pod):
            queries.append((selector["cel"]["expression"], model))
    answers = _kubernetes_answers(cel_check, queries)
    assert all("error" not in answer for answer in answers), answers[:3]
    for (expression, model), answer in zip(queries, answers, strict=True):
        excluded = expression.startswith("!")
        wanted = wanted_of_pattern(json.loads(expression.split(".matches(")[1][:-1]))
        expected = type_matches(wanted or "", model) != excluded
        assert answer["matches"] == expected, (expression, model)


def test_a_model_of_several_types_matches_any_wanted_one_in_kubernetes(cel_check: Path) -> None:
    [expression] = [s["cel"]["expression"] for s in selectors(_pod(["A10", "t4"]))]
    answers = _kubernetes_answers(cel_check, [(expression, model) for model in MODELS])
    assert [a["matches"] for a in answers] == [model in {A10, T4} for model in MODELS]
