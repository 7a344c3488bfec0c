"""Which view renders which SDK object, as HTML for notebooks and as text for terminals.

The data classes (tables, placements, plans) answer ``_repr_html_`` and ``str`` through
:func:`as_html` and :func:`as_text`; :mod:`vslice.views` registers its renderers here when it
is imported, and the package imports it first thing. So the data modules never import the
views (which import them to read their fields), and a new view is one :func:`register` call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")


class Renderers(NamedTuple):
    html: Callable[[Any], str]
    text: Callable[[Any], str]


_RENDERERS: dict[type, Renderers] = {}


def register(kind: type[T], *, html: Callable[[T], str], text: Callable[[T], str]) -> None:
    """Render ``kind`` (and its subclasses, unless they register their own) with these."""
    _RENDERERS[kind] = Renderers(html, text)


def renderers_of(kind: type) -> Renderers:
    """The renderers registered for ``kind`` or its closest base class."""
    for base in kind.__mro__:
        if base in _RENDERERS:
            return _RENDERERS[base]
    raise LookupError(f"no view renders {kind.__name__} (vslice.views registers them)")


def renderers(obj: object) -> Renderers:
    """The renderers registered for the closest class of ``obj``."""
    return renderers_of(type(obj))


def as_html(obj: object) -> str:
    return renderers(obj).html(obj)


def as_text(obj: object) -> str:
    return renderers(obj).text(obj)
