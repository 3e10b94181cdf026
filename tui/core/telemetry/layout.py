"""The active layout as the telemetry sees it: endpoints to poll, processes to map, who is still starting.

The state file is re-read only when it changed (its inode, mtime or size), at most once per ``min_interval_s``, so
the sampler (4 Hz) and the poller can ask freely; a caller that follows the layout asks for a fresh read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from tui.core.errors import InputError
from tui.core.launch.state import LayoutRecord, StateStore
from tui.core.telemetry.poller import Endpoint
from tui.core.telemetry.procmap import ServerRef, refs_from_layout


def endpoints_from_layout(layout: LayoutRecord) -> list[Endpoint]:
    """Every server and the proxy of a layout, in the order they were launched."""
    out = []
    plan_urls = {s.get("name"): s.get("url") for s in layout.plan.get("servers", [])}
    proxy = layout.plan.get("proxy") or {}
    for p in layout.processes:
        url = p.url or plan_urls.get(p.name) or (proxy.get("url") if p.role == "proxy" else None)
        if url:
            out.append(Endpoint(name=p.name, url=str(url), role=p.role, api_key=p.api_key))
    return out


def parse_endpoint(text: str, index: int = 0) -> Endpoint:
    """``[NAME=]URL[#ROLE]`` → an endpoint (``decode=http://127.0.0.1:8200#decode``)."""
    role = "single"
    if "#" in text:
        text, role = text.rsplit("#", 1)
    name, sep, url = text.partition("=")
    if not sep or "://" in name:
        name, url = f"server-{index}", text
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise InputError(f"expected [NAME=]http://HOST:PORT[#ROLE], got {text!r} ({exc})", field="--endpoint"
                         ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"expected [NAME=]http://HOST:PORT[#ROLE], got {text!r}", field="--endpoint")
    return Endpoint(name=name, url=url.rstrip("/"), role=role or "single")


ACTIVE_STATUSES = ("starting", "ready", "stopping")


def _read_active(store: StateStore) -> LayoutRecord | None:
    """The active layout, read without the lock (``StateStore.peek``), as often as the poller asks. A damaged file
    reads as no layout."""
    try:
        layouts = store.peek()
    except InputError:
        return None
    return next((rec for rec in layouts.values() if rec.status in ACTIVE_STATUSES), None)


class ActiveLayout:
    """A cached view of ``StateStore.active()``; thread-safe (the sampler's thread reads it too)."""

    def __init__(self, store: StateStore | None, *, min_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self._min_interval = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._checked = -1e18
        self._key: tuple[int, int, int] | None = None  # what the file was when last read
        self._layout: LayoutRecord | None = None
        self._refs: tuple[ServerRef, ...] = ()

    def get(self, *, fresh: bool = False) -> LayoutRecord | None:
        """The active layout. At most one look at the file per ``min_interval_s``, unless ``fresh``: a caller that
        heard the layout change (launched, ready) reads the file now, whatever was read a moment ago."""
        if self.store is None:
            return None
        with self._lock:
            now = self._clock()
            if not fresh and now - self._checked < self._min_interval:
                return self._layout
            self._checked = now
            try:
                st = self.store.file.stat()
                # the file is replaced whole (a new inode each time): two writes within the file system's
                # timestamp granularity still differ
                key: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
            except OSError:
                key = None
            if fresh or key != self._key:
                self._key = key
                self._layout = _read_active(self.store) if key is not None else None
                self._refs = refs_from_layout(self._layout) if self._layout is not None else ()
            return self._layout

    def refs(self) -> tuple[ServerRef, ...]:
        self.get()
        return self._refs

    def endpoints(self, *, fresh: bool = False) -> list[Endpoint]:
        layout = self.get(fresh=fresh)
        return endpoints_from_layout(layout) if layout is not None else []

    def starting(self, name: str) -> bool:
        """Whether the supervisor says this server is still starting (so a refused connection is expected)."""
        layout = self.get()
        if layout is None or layout.status not in ("starting", "ready"):
            return False
        rec = layout.process(name)
        if rec is None or rec.exited is not None:
            return False
        return rec.ready_at is None
