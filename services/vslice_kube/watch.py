"""List+watch: keep a local copy of one kind of object current, as plain dicts.

One :class:`ListWatch` thread lists the objects, hands the full list to ``replace``, then
watches from the list's resourceVersion and hands every change to ``apply``. It relists when
the server says the resourceVersion is too old (410 Gone, in an ERROR event or as a status),
after any stream failure (with backoff), and every ``resync_seconds`` so a missed event can
never stay missed for long. Bookmarks only advance the resourceVersion.

Objects are read with ``_preload_content=False`` and parsed as JSON: the handler sees exactly
what the API sent (camelCase keys, annotations as strings) without the client's model classes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger("vslice.watch")

WATCH_SECONDS = 240


class WatchHandler(Protocol):
    def replace(self, items: list[dict[str, Any]]) -> None:
        """The complete current set of objects (after a list)."""

    def apply(self, event: str, obj: dict[str, Any]) -> None:
        """One change: ``ADDED``, ``MODIFIED`` or ``DELETED``."""


class Expired(Exception):
    """The watch's resourceVersion is too old: relist."""


class ListWatch:
    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        handler: WatchHandler,
        *,
        resync_seconds: float = 300.0,
        backoff_seconds: float = 1.0,
    ) -> None:
        self.name = name
        self._list_call = list_call
        self._handler = handler
        self._resync = resync_seconds
        self._backoff = backoff_seconds
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)
        self.relists = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            _interrupt(stream)
        self._thread.join(timeout=5)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._list()
                failures = 0
                self._watch_until_resync(version)
            except Expired:
                log.info("resourceVersion expired, relisting", extra={"watch": self.name})
            except Exception as exc:  # the watch must outlive any one failure
                if self._stop.is_set():
                    return
                if not isinstance(exc, ApiException | HTTPError | OSError | ValueError):
                    log.exception("unexpected watch failure", extra={"watch": self.name})
                failures += 1
                delay = min(self._backoff * 2 ** min(failures - 1, 5), 30.0)
                log.warning(
                    "watch failed, relisting",
                    extra={"watch": self.name, "error": _describe(exc), "retry_in_s": delay},
                )
                self._stop.wait(delay)

    def _list(self) -> str:
        response = self._list_call(_preload_content=False, _request_timeout=60)
        body = json.loads(response.data)
        self._handler.replace(list(body.get("items") or []))
        self.relists += 1
        self._synced.set()
        version = str(body["metadata"]["resourceVersion"])
        log.debug("listed", extra={"watch": self.name, "resource_version": version})
        return version

    def _watch_until_resync(self, version: str) -> None:
        deadline = time.monotonic() + self._resync
        while not self._stop.is_set() and time.monotonic() < deadline:
            timeout = max(1, min(WATCH_SECONDS, int(deadline - time.monotonic())))
            try:
                self._stream = self._list_call(
                    watch=True,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=timeout,
                    _preload_content=False,
                    _request_timeout=(10, timeout + 30),
                )
            except ApiException as exc:
                if exc.status == 410:
                    raise Expired(str(exc.reason)) from exc
                raise
            try:
                for event in _events(self._stream):
                    version = self._dispatch(event, version)
            finally:
                self._stream.release_conn()
                self._stream = None

    def _dispatch(self, event: dict[str, Any], version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired(obj.get("message", ""))
            raise ValueError(f"watch error event: {obj.get('message', obj)}")
        new_version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self._handler.apply(kind, obj)
        return new_version


def _events(stream: Any) -> Iterator[dict[str, Any]]:
    """JSON events of a watch response, one per line."""
    pending = b""
    for chunk in stream.stream(amt=65536, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
    if pending.strip():
        yield json.loads(pending)


def _interrupt(stream: Any) -> None:
    """Wake the thread blocked reading ``stream``: shut its socket down. (Closing the response
    instead would wait for that very read to finish, up to the watch's timeout.)"""
    sock = getattr(getattr(stream, "connection", None), "sock", None)
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
