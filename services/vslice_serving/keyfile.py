"""Reading the allocation key file that the extender signs with and the node agent checks
with. The format and its checks are pure (:func:`vslice_core.proof.parse_keys`); only the
reading is here, so the core never touches a file."""

from __future__ import annotations

from pathlib import Path

from vslice_core.errors import InvalidRequest
from vslice_core.proof import Key, parse_keys


def load_keys(path: Path) -> dict[str, Key]:
    """The keys of the file at ``path``, or :class:`InvalidRequest` naming the file and why."""
    try:
        text = path.read_text()
    except OSError as error:
        raise InvalidRequest(
            f"allocation key file {str(path)!r} cannot be read: {error.strerror}",
            field="allocation_key_file",
            value=str(path),
        ) from None
    return parse_keys(text, str(path))
