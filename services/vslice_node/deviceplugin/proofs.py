"""The node side of the allocation proof (:mod:`vslice_core.proof`): is this allocation the
extender's, for this pod on this node?

With ``allocation_key_file`` set, a pod's allocation counts only with a valid
``vslice.io/allocation-proof``; the allocator never takes an unproven one as pending, and an
Allocate that only an unproven pod could match is refused with the reason. The key file is
read again whenever it changes on disk (rotation: the operator appends the new key, the
extender signs with it, the old one is removed later), so no restart is needed.

Fails closed: a key file that is set but missing, unreadable or malformed refuses every
allocation with a reason naming the file, until it can be read; :attr:`ProofCheck.state`
(on /status) and one log line per change say so. Empty ``allocation_key_file``: proofs are
off and every allocation counts, as before proofs existed (a log line at start says so).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from vslice_core import proof
from vslice_core.errors import InvalidRequest
from vslice_serving.keyfile import load_keys

log = logging.getLogger("vslice.deviceplugin.proofs")


class ProofCheck:
    def __init__(self, key_file: str) -> None:
        self.path = Path(key_file) if key_file else None
        self._lock = threading.Lock()
        self._keys: Mapping[str, proof.Key] = {}
        self._problem: str | None = None  # why the key file cannot be used, None = usable
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime) last loaded
        if self.path is None:
            log.warning(
                "allocation proofs are not checked (allocation_key_file is empty): any "
                "vslice.io/allocation on this node's pods is trusted"
            )
        else:
            self._reload()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    @property
    def state(self) -> str:
        """For /status: off, how many keys are in force, or why everything is refused."""
        if self.path is None:
            return "off (allocation_key_file is empty)"
        with self._lock:
            self._reload_locked()
            if self._problem is not None:
                return f"refusing every allocation: {self._problem}"
            return f"ok: {len(self._keys)} key(s) from {self.path}"

    def problem(
        self, proof_text: str | None, pod_uid: str, node: str, allocation: str
    ) -> str | None:
        """None when the allocation counts, else why not (a phrase for an event)."""
        if self.path is None:
            return None
        with self._lock:
            self._reload_locked()
            if self._problem is not None:
                return f"{self._problem}; every allocation on this node is refused"
            return proof.check(self._keys, proof_text, pod_uid, node, allocation)

    def _reload(self) -> None:
        with self._lock:
            self._reload_locked()

    def _reload_locked(self) -> None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._fail(f"allocation key file {str(self.path)!r} cannot be read: {exc.strerror}")
            return
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == self._seen and self._problem is None:
            return
        try:
            keys = load_keys(self.path)
        except InvalidRequest as exc:
            self._fail(str(exc))
            return
        self._seen = seen
        if self._problem is not None or not self._keys:
            log.info(
                "allocation proof keys loaded", extra={"file": str(self.path), "keys": len(keys)}
            )
        self._keys, self._problem = keys, None

    def _fail(self, why: str) -> None:
        if why != self._problem:  # one line per change, not one per Allocate
            log.error("every allocation is refused", extra={"error": why})
        self._problem, self._keys, self._seen = why, {}, None
