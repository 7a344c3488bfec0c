"""Directory nests deeper than Python's recursion limit, as a hostile container can make in
its own region directory, and their removal when a test is done.

Such a nest left in a test's tmp_path breaks the whole run: pytest removes old base
directories with ``shutil.rmtree``, which recurses once per level, and its RecursionError at
the end of a run fails every later run on the machine. So the nest is always removed here, by
``rm -rf`` (which does not recurse on the stack), whether the code under test removed it or not.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DEPTH = 1200  # Python's default recursion limit is 1000


@contextmanager
def deep_nest(inside: Path, removal_root: Path, link_to: Path | None = None) -> Iterator[None]:
    """``DEPTH`` directories ``d/d/...`` in ``inside`` (each with a link ``up`` to ``link_to``
    when given); ``removal_root`` (which holds ``inside``) is removed on the way out."""
    try:
        fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(DEPTH):
            os.mkdir("d", dir_fd=fd)
            if link_to is not None:
                os.symlink(str(link_to), "up", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        os.close(fd)
        yield
    finally:
        subprocess.run(["rm", "-rf", "--", str(removal_root)], check=False)
