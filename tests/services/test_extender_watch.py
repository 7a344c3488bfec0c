"""List+watch on expired resourceVersions, stream failures and bookmarks.

The API server here is a script of the exact answers a real one gives (list bodies, watch
streams of JSON lines, ``410 Gone`` both as an ERROR event and as the watch request's own
status): the lab's API server serves even very old resourceVersions from its watch cache, so
it cannot be made to expire one on demand. Everything else runs as in production.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException
from vslice_kube.watch import ListWatch


class Listed:
    def __init__(self, names: list[str], version: str) -> None:
        items = [{"metadata": {"name": n, "resourceVersion": version}} for n in names]
        self.data = json.dumps({"metadata": {"resourceVersion": version}, "items": items})


class Stream:
    """A watch response: JSON lines, possibly split across chunks, as the server sends them."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._payload = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.connection = None

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        for start in range(0, len(self._payload), 7):  # odd chunk sizes on purpose
            yield self._payload[start : start + 7]

    def release_conn(self) -> None:
        pass


def event(kind: str, name: str, version: str) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": name, "resourceVersion": version}}}


GONE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
        "message": "too old resource version: 5 (100)",
    },
}


class ScriptedServer:
    """Answers list and watch calls from a script; records every call's resourceVersion."""

    def __init__(self, script: list[Any]) -> None:
        self._script = script
        self.calls: list[tuple[str, str | None]] = []
        self.finished = threading.Event()

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(
            ("watch" if kwargs.get("watch") else "list", kwargs.get("resource_version"))
        )
        if not self._script:
            self.finished.set()
            time.sleep(0.05)
            return Stream([])
        answer = self._script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class Recorder:
    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def replace(self, items: list[dict[str, Any]]) -> None:
        self.lists.append([i["metadata"]["name"] for i in items])

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((kind, obj["metadata"]["name"]))


def run(script: list[Any]) -> tuple[ScriptedServer, Recorder, ListWatch]:
    server, recorder = ScriptedServer(script), Recorder()
    watch = ListWatch("pods", server, recorder, backoff_seconds=0.01)
    watch.start()
    assert server.finished.wait(10), "the watch stopped calling the server"
    watch.stop()
    return server, recorder, watch


def test_an_expired_event_relists_and_watching_resumes_from_the_new_list() -> None:
    server, recorder, _ = run(
        [
            Listed(["a"], "5"),
            Stream([event("ADDED", "b", "6"), GONE]),
            Listed(["a", "b", "c"], "100"),
            Stream([event("DELETED", "a", "101")]),
        ]
    )
    assert recorder.lists == [["a"], ["a", "b", "c"]]
    assert recorder.events == [("ADDED", "b"), ("DELETED", "a")]
    assert server.calls[:4] == [("list", None), ("watch", "5"), ("list", None), ("watch", "100")]


def test_a_410_answer_to_the_watch_request_relists_too() -> None:
    gone = ApiException(status=410, reason="Gone")
    server, recorder, _ = run([Listed([], "5"), gone, Listed(["x"], "9"), Stream([])])
    assert recorder.lists == [[], ["x"]]
    assert server.calls[2:4] == [("list", None), ("watch", "9")]


def test_bookmarks_only_move_the_resource_version() -> None:
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}
    server, recorder, _ = run([Listed([], "5"), Stream([bookmark]), Stream([])])
    assert recorder.events == []
    assert ("watch", "42") in server.calls


def test_a_broken_stream_or_server_error_relists_after_a_backoff() -> None:
    broken = ApiException(status=500, reason="Internal Server Error")
    garbage = Stream([])
    garbage._payload = b"{not json\n"
    _, recorder, watch = run([Listed(["a"], "5"), garbage, broken, Listed(["a"], "7"), Stream([])])
    assert recorder.lists == [["a"], ["a"]]
    assert watch.relists == 2
