"""Every SDK object that shows itself in a notebook has a registered view, and a subclass
renders like its parent: the data modules reach their views only through vslice.rendering."""

from __future__ import annotations

import inspect

import pytest
import vslice
from vslice import plans, rendering, tables


def _displayed_classes() -> list[type]:
    found = []
    for module in (tables, plans):
        for _, kind in inspect.getmembers(module, inspect.isclass):
            if kind.__module__ == module.__name__ and "_repr_html_" in vars(kind):
                found.append(kind)
    return found


@pytest.mark.parametrize("kind", _displayed_classes(), ids=lambda kind: kind.__name__)
def test_every_displayed_class_has_a_view(kind: type) -> None:
    found = rendering.renderers_of(kind)  # LookupError names the class when none is registered
    assert callable(found.html) and callable(found.text)


def test_a_subclass_renders_like_its_parent() -> None:
    class MyTable(vslice.GpuTable):
        pass

    empty = MyTable([])
    assert str(empty) == str(vslice.GpuTable([]))
    assert empty._repr_html_() == vslice.GpuTable([])._repr_html_()


def test_an_object_without_a_view_says_which() -> None:
    class Unknown:
        pass

    with pytest.raises(LookupError, match="no view renders Unknown"):
        rendering.as_text(Unknown())
