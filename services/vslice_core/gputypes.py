"""GPU type selectors: when a wanted type (``vslice.io/gpu-type``) names a GPU model.

A name is read as words: the runs of ASCII letters and digits, lower-cased, so
``NVIDIA-A100-SXM4-80GB`` is ``nvidia a100 sxm4 80gb`` and ``Tesla T4`` is ``tesla t4``. A
wanted type matches a model when its own words appear in the model's words as a consecutive
run:

    "a10"       matches "NVIDIA A10", not "NVIDIA-A100-SXM4-80GB"
    "A100", "a100-sxm4", "a100 sxm4", "nvidia"  match "NVIDIA-A100-SXM4-80GB"
    "SXM"       matches "NVIDIA-H100-SXM" (a whole word), not "NVIDIA-A100-SXM4-80GB"
    "sxm4-8"    matches nothing ("8" is part of the word "80gb")

Why words and not substrings: HAMi (and vslice before) matched substrings, so a pod that asked
for an A10 could land on an A100, and ``A10`` could not be excluded without excluding A100s.

One rule, three paths: the engine (extender, ``vslice plan``, the SDK) compares
:func:`type_key` strings, computed once per GPU model; the DRA path writes the same rule as a
CEL selector (:func:`cel_pattern`, Kubernetes' ``matches()`` on ``lowerAscii()``), and reads
it back with :func:`wanted_of_pattern`. Letters outside ASCII are separators on both paths,
because CEL's ``lowerAscii`` leaves them as they are and the pattern only spans ``[a-z0-9]``.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9]+", re.ASCII | re.IGNORECASE)
# RE2 (CEL's matches()) and Python read these the same way.
_GAP = "[^a-z0-9]+"
_START = "(^|[^a-z0-9])"
_END = "($|[^a-z0-9])"
_PATTERN = re.compile(
    r"^\(\^\|\[\^a-z0-9\]\)([a-z0-9]+(?:\[\^a-z0-9\]\+[a-z0-9]+)*)\(\$\|\[\^a-z0-9\]\)$"
)


def words(name: str) -> tuple[str, ...]:
    """The words of a model name or a wanted type: ``"Tesla-T4"`` -> ``("tesla", "t4")``."""
    return tuple(word.lower() for word in _WORD.findall(name))


def type_key(name: str) -> str:
    """The words joined and framed by single spaces (``" tesla t4 "``): a wanted type's key is
    a substring of a model's key exactly when its words are a run of the model's words, so
    the engine's per-GPU check stays one ``in``."""
    return " " + " ".join(words(name)) + " "


def key_matches(wanted_key: str, model_key: str) -> bool:
    """Whether a wanted type matches a model, both given as :func:`type_key`."""
    return wanted_key in model_key


def type_matches(wanted: str, model: str) -> bool:
    """Whether the wanted type names this model (case-insensitive, whole words)."""
    return key_matches(type_key(wanted), type_key(model))


def has_words(wanted: str) -> bool:
    """A wanted type must have a letter or digit: one without would match nothing."""
    return bool(words(wanted))


def cel_pattern(wanted: str) -> str:
    """The RE2 pattern that matches a lower-cased model name exactly when
    :func:`type_matches` does: ``"a100-sxm4"`` -> ``(^|[^a-z0-9])a100[^a-z0-9]+sxm4($|[^a-z0-9])``.
    Words hold only ``[a-z0-9]``, so none needs escaping."""
    return _START + _GAP.join(words(wanted)) + _END


def wanted_of_pattern(pattern: str) -> str | None:
    """The wanted type a :func:`cel_pattern` was made from (its words, space-separated), or
    None for any other pattern."""
    found = _PATTERN.match(pattern)
    if found is None:
        return None
    return " ".join(found.group(1).split(_GAP))
