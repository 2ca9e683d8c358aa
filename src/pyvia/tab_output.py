"""What a tab sends: its view rendered, its signals as the browser should hold them, and the frames
that carry both to its stream, in the order they were made.

:class:`TabOutput` is the half of :class:`~pyvia.context.Context` that faces the browser; the
other half (declarations, scopes, hooks, running user code) is in :mod:`pyvia.context`. It is a
base class rather than an object of its own so that a tab stays one object (per-tab memory).

Rules:

1. A signal goes to the browser whole (the page's seed, a stream that may have missed frames)
   or as the change since it was last sent (a merge patch), and is marked as sent either way.
2. Every patch that carries a server-owned tab signal carries a new signed snapshot of all of
   them (:mod:`pyvia.snapshot`), so the browser can revive the tab on a server that lost it.
3. Frames reach the stream in the order they were made, an ``async`` view's included: what
   comes after one waits until it is rendered.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import orjson

from pyvia import protocol
from pyvia.alerts import ERROR_SIGNAL
from pyvia.devtools import panel as devtools_panel
from pyvia.errors import DeclarationError
from pyvia.lifecycle import DESTROYED, State
from pyvia.render import body_of, is_document, with_foot
from pyvia.scopes import SharedSignal
from pyvia.signals import Signal, owned_values
from pyvia.view_frame import ViewFrame, check_block

if TYPE_CHECKING:
    from pyvia.app import App
    from pyvia.components import Component
    from pyvia.context import Action, Context, ViewCallable
    from pyvia.routing import Route
    from pyvia.stream import Stream

__all__ = ["TabOutput"]


def redirect_script(url: str) -> str:
    """The JavaScript that sends a page to ``url``."""
    return f"window.location.href = {orjson.dumps(url).decode()}"


class TabOutput:
    """Rendering, signal patches and delivery of one tab (the base of :class:`~pyvia.context.Context`)."""

    # the browser's copy: the last snapshot's number, whether its alert shows a server message; the
    # frames of the action being run, and those waiting behind an async view that is rendering
    __slots__ = ("_batch", "_snapshot_seq", "error_shown", "pending_frames", "updating")
    _batch: list[bytes | ViewFrame | Awaitable[ViewFrame | None]] | None
    _snapshot_seq: int
    error_shown: bool
    pending_frames: deque[tuple[bytes, Any]] | None
    updating: bool

    if TYPE_CHECKING:  # what Context holds (its __slots__) and this half reads
        app: App
        id: str
        session_id: str
        _signals: dict[str, Signal[Any]]
        actions: dict[str, Action]
        _shared: dict[str, SharedSignal[Any]] | Mapping[str, SharedSignal[Any]]
        _components: dict[str, Component] | Mapping[str, Component]
        _view: str | ViewCallable | None
        _view_block: str | None
        _view_data: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None
        state: State
        last_action: float
        revived: bool
        stream: Stream
        tab_state: dict[str, Any]
        route: Route
        foot_tags: list[str] | tuple[()]

    # --- rendering -------------------------------------------------------------------------------

    def render(self, template: str, data: Mapping[str, Any] | None = None, *, block: str | None = None) -> str:
        """Render a template with this tab's signals and actions injected by name."""
        ns: dict[str, Any] = {"c": self, **self._signals, **self.actions, **self._components}
        for sig in self._shared.values():
            ns[sig.name] = sig
        if data:
            ns.update(data)
        return self.app.templates.render(template, ns, block)

    def render_view(self, is_update: bool) -> str | Awaitable[str]:
        """The view's HTML; an awaitable of it when the view is ``async``."""
        view = self._view
        if view is None:
            return ""
        self.updating = is_update
        app = self.app
        app.rendering = self
        try:
            if isinstance(view, str):
                data = self._view_data() if callable(self._view_data) else self._view_data
                return self.render(view, data, block=self._view_block if is_update else None)
            return view(is_update)
        finally:
            app.rendering = None

    def view_frame(self) -> ViewFrame | asyncio.Future[ViewFrame | None] | None:
        """The view as a patch frame; a future of it for an ``async`` view (awaitable by every tab of
        a shared render)."""
        markup = self.render_view(True)
        if not isinstance(markup, str):
            return self.app.create_task(self._frame_when_rendered(markup))
        return self._frame_of(markup)

    async def _frame_when_rendered(self, pending: Awaitable[str]) -> ViewFrame | None:
        return self._frame_of(await pending)

    def _frame_of(self, markup: str) -> ViewFrame | None:
        if not markup:
            return None
        if self._view_block is not None:
            checked = self.route.checked_blocks
            if self._view_block not in checked:
                checked.add(self._view_block)
                check_block(self.route.pattern, self._view_block, markup)
            frame = ViewFrame(protocol.patch_elements(markup))
        elif is_document(markup):  # the body's inside, with what the page put at its end
            frame = ViewFrame(
                protocol.patch_elements(body_of(with_foot(markup, self.document_foot())), "body", "inner")
            )
        else:
            frame = ViewFrame.of_view(markup)
        self.stream.view_size = len(frame)  # what a full render costs: a resume weighs its frames against it
        return frame

    def document_foot(self) -> str:
        """What the page puts at the end of a whole document's body: the route's alert, the app's
        and the tab's foot tags, the dev panel. An update of the body must carry it again."""
        config = self.app.config
        parts = [self.route.alert, *config.foot, *self.foot_tags]
        if config.dev:
            parts.append(devtools_panel(self.app))
        return "\n".join(parts)

    def seed_signals(self) -> dict[str, Any]:
        """Every signal of the page's first HTML: tab and shared values whole, with their revisions
        and the snapshot; all marked as sent."""
        out: dict[str, Any] = {}
        revisions: dict[str, int] = {}
        for sig in self._signals.values():
            out[sig.id] = sig.take_whole()
            if sig.writable and sig.revision:
                revisions[sig.id] = sig.revision
        self._add_shared(out, revisions)
        return self._finish_patch(out, revisions, True)  # even an empty snapshot: it vouches for the tab

    def full_signals(self) -> dict[str, Any]:
        """What a stream that may have missed frames gets: every server-owned value and every writable
        one the server wrote since the browser last posted it, whole. (The other writable values
        are the user's: sending them back would undo what was typed since.)"""
        out: dict[str, Any] = {}
        revisions: dict[str, int] = {}
        owned = False
        for sig in self._signals.values():
            if sig.writable:
                if sig.revision <= sig.acked:
                    continue
                revisions[sig.id] = sig.revision
            else:
                owned = True
            out[sig.id] = sig.take_whole()
        self._add_shared(out, revisions)
        return self._finish_patch(out, revisions, owned)

    def changed_signals(self) -> dict[str, Any]:
        """The tab signals changed since they were last sent, as a merge patch, marked as sent."""
        out: dict[str, Any] = {}
        revisions: dict[str, int] | None = None
        owned = False
        for sig in self._signals.values():
            if sig.changed:
                out[sig.id] = sig.take_patch()
                if sig.writable:
                    if revisions is None:
                        revisions = {}
                    revisions[sig.id] = sig.revision
                else:
                    owned = True
        if not out:
            return out
        return self._finish_patch(out, revisions, owned)

    def _add_shared(self, out: dict[str, Any], revisions: dict[str, int]) -> None:
        for sid, sig in self._shared.items():
            out[sid] = sig.value
            if sig.writable and sig.revision:
                revisions[sid] = sig.revision

    def _finish_patch(self, out: dict[str, Any], revisions: dict[str, int] | None, owned: bool) -> dict[str, Any]:
        if revisions:
            out[protocol.REVISION_SIGNAL] = revisions
        if owned:
            out[protocol.SNAPSHOT_SIGNAL] = self._snapshot()
        return out

    def _snapshot(self, numbered: bool = True) -> str | None:
        """A signed snapshot of the server-owned tab signals (None past the size bound): a new one,
        or, not ``numbered``, the values now under the number of the last one sent."""
        if numbered:
            self._snapshot_seq += 1
        return self.app.snapshots.make(self.id, self._snapshot_seq, owned_values(self._signals))

    def restore_snapshot(self, seq: int, values: Mapping[str, Any]) -> None:
        """Give the server-owned tab signals the values of a verified snapshot (a revival)."""
        self._snapshot_seq = max(self._snapshot_seq, seq)
        for name, value in values.items():
            sig = self._signals.get(name)
            if sig is not None and not sig.writable:
                sig.restore(value)

    def final_snapshot(self) -> str | None:
        """A snapshot of the values now, numbered as the last one sent (kept when the tab is destroyed)."""
        return self._snapshot(numbered=False)

    @property
    def has_writable_signals(self) -> bool:
        """Whether the page holds values only it knows (what the user typed): a revival asks for them."""
        return any(sig.writable for sig in self._signals.values()) or any(sig.writable for sig in self._shared.values())

    @property
    def is_pristine(self) -> bool:
        """Whether the page it was built for holds all there is of this tab: never revived, no
        action, nothing sent or changed since the page (whose snapshot is number 1), nothing in
        ``tab_state``. A revival from the page's own id and snapshot rebuilds such a tab exactly."""
        return (
            not self.revived
            and not self.last_action
            and self._snapshot_seq <= 1
            and not self.tab_state
            and not any(sig.changed for sig in self._signals.values())
        )

    @property
    def snapshot_seq(self) -> int:
        """The number of the last snapshot the browser was sent (a revival refuses older ones)."""
        return self._snapshot_seq

    # --- sending ---------------------------------------------------------------------------------

    def sync(self) -> None:
        """Re-render the view and send it with the changed signals."""
        self.send_frame(self.signal_frame(), self.view_frame())

    def sync_signals(self) -> None:
        """Send the signals that changed since they were last sent."""
        frame = self.signal_frame()
        if frame:
            self.send_frame(frame, None)

    def patch_elements(
        self,
        html: str = "",
        selector: str | None = None,
        mode: str = "outer",
        *,
        namespace: str = "html",
        use_view_transition: bool = False,
        event_id: str | None = None,
        retry: int | None = None,
    ) -> None:
        """Patch part of the page: morph by id (default) or place ``html`` at ``selector`` by ``mode``.

        ``namespace`` (``"svg"``, ``"mathml"``) creates new elements in that namespace;
        ``use_view_transition`` runs the patch in a view transition where the browser has them;
        ``event_id`` and ``retry`` (ms) are the SSE fields, sent as given (the tab's own frame id
        follows each frame, and it is what a reconnect resumes from). Options at their default are
        not sent.
        """
        if mode not in ("outer", "replace") and selector is None:
            raise DeclarationError(f"patch_elements mode {mode!r} needs a selector")
        self.send_frame(
            protocol.patch_elements(
                html,
                selector,
                mode,
                namespace=namespace,
                use_view_transition=use_view_transition,
                event_id=event_id,
                retry=retry,
            ),
            None,
        )

    def remove_elements(
        self, selector: str, *, use_view_transition: bool = False, event_id: str | None = None, retry: int | None = None
    ) -> None:
        """Remove the elements that ``selector`` matches from the page."""
        self.send_frame(
            protocol.remove_elements(selector, use_view_transition=use_view_transition, event_id=event_id, retry=retry),
            None,
        )

    def patch_signals(
        self,
        values: Mapping[str, Any] | str | bytes,
        *,
        only_if_missing: bool = False,
        event_id: str | None = None,
        retry: int | None = None,
    ) -> None:
        """Send signal values to the browser without declaring them (``None`` removes one).

        ``values`` is a mapping or JSON text of one object. ``only_if_missing``: the browser keeps
        the values it already has and takes only the signals it lacks. This does not change the
        server's own ``Signal`` values.
        """
        raw = values if isinstance(values, (str, bytes)) else dict(values)
        self.send_frame(
            protocol.patch_signals(raw, only_if_missing=only_if_missing, event_id=event_id, retry=retry), None
        )

    def remove_signals(
        self, paths: str | Iterable[str], *, event_id: str | None = None, retry: int | None = None
    ) -> None:
        """Remove signals from the browser's store, by name or dotted path (``"form.email"``)."""
        self.send_frame(protocol.remove_signals(paths, event_id=event_id, retry=retry), None)

    def send_raw(self, events: str | bytes) -> None:
        """Send whole Datastar events made elsewhere (the datastar-py SDK's, say), after checking them.

        They are always delivered, in order with this tab's other events; a raw signals patch does
        not change the server's own ``Signal`` values.
        """
        self.send_frame(protocol.check_events(events), None)

    def show_error(self, message: str, given_back: Mapping[str, Any] | None = None) -> None:
        """Show ``message`` in the tab's alert (pyvia.alerts) until its next action succeeds, with
        ``given_back`` (:meth:`posted_back`) in the same patch."""
        self.error_shown = True
        self.send_frame(protocol.patch_signals({**(given_back or {}), ERROR_SIGNAL: message}), None)

    def posted_back(self, posted: Mapping[str, Any], *, refused: bool = False) -> dict[str, Any]:
        """The writable values a failed action was posted that the tab still holds as posted: sent
        back with the error, so that a click which cleared its input in the browser loses nothing.
        ``refused``: the post was refused before its action ran (a value over its ``max_length``, a
        middleware's answer), so every writable value it carried goes back, a refused one too."""
        back: dict[str, Any] = {}
        signals = self._signals
        for key, value in posted.items():
            sig = signals.get(key)
            if sig is None and refused:
                sig = self._shared.get(key)
            if sig is not None and sig.writable and (refused or sig.value == value):
                back[key] = value
        return back

    def clear_error(self) -> None:
        """Hide the message the server put in the tab's alert, if any."""
        if self.error_shown:
            self.error_shown = False
            self.send_frame(protocol.patch_signals({ERROR_SIGNAL: ""}), None)

    def exec_script(
        self,
        js: str,
        *,
        auto_remove: bool = True,
        attributes: Mapping[str, str] | Sequence[str] | None = None,
        event_id: str | None = None,
        retry: int | None = None,
    ) -> None:
        """Run JavaScript once in the tab.

        ``attributes`` go on the script tag: a mapping (``{"type": "module"}``, values escaped) or
        the SDK spec's list of ``'name="value"'`` strings. ``auto_remove=False`` leaves the tag in
        the page.
        """
        if js:
            self.send_frame(
                protocol.execute_script(
                    js, auto_remove=auto_remove, attributes=attributes, event_id=event_id, retry=retry
                ),
                None,
            )

    def redirect(self, url: str) -> None:
        """Send the tab to another URL."""
        self.exec_script(redirect_script(url))

    def download(self, source: str | Any | Iterable[bytes], filename: str, *, media_type: str | None = None) -> str:
        """Register a one-shot download for this tab's session and return its URL."""
        return self.app.url(self.app.downloads.add(self.session_id, source, filename, media_type))

    def signal_frame(self) -> bytes:
        changed = self.changed_signals()
        return protocol.patch_signals(changed) if changed else b""

    def send_frame(self, data: bytes, view: ViewFrame | Awaitable[ViewFrame | None] | None) -> None:
        if self.state is DESTROYED:
            return
        batch = self._batch
        if batch is not None:
            if view is not None:
                batch.append(view)  # an awaitable too: end_batch sorts them out
            if data:
                batch.append(data)
            return
        self.deliver(data, view)

    def deliver(self, data: bytes, view: ViewFrame | Awaitable[ViewFrame | None] | None = None) -> None:
        """Write a frame to the tab's stream now, or, while an ``async`` view is still rendering,
        after it: a tab's updates always arrive in the order they were made."""
        queue = self.pending_frames
        if queue is None:
            if view is None or type(view) is ViewFrame:
                self.stream.send(data, view, self.app.now())
                return
            queue = self.pending_frames = deque()
            self.app.spawn(self._deliver_in_order(queue), cast("Context", self), "render")  # its one subclass
        queue.append((data, view))

    async def _deliver_in_order(self, queue: deque[tuple[bytes, Any]]) -> None:
        while queue:
            data, view = queue[0]
            if view is not None and type(view) is not ViewFrame:
                try:
                    view = await view
                except Exception as exc:  # the render failed: the frames behind it still go out
                    if self.state is not DESTROYED:  # else it failed because its tab went away
                        self.app.report(exc, cast("Context", self), "render", reraise=False)
                    view = None
            queue.popleft()
            if self.state is not DESTROYED:
                self.stream.send(data, view, self.app.now())
        self.pending_frames = None

    def begin_batch(self) -> None:
        self._batch = []

    def end_batch(self) -> None:
        """Send what the batch collected plus the changed signals, in one write."""
        batch, self._batch = self._batch, None
        changed = self.changed_signals()  # _signal_frame(), inline: once per action
        frame = protocol.patch_signals(changed) if changed else b""
        if not batch:  # the action sent nothing itself: at most its signals patch
            if frame:
                self.deliver(frame)
            return
        if frame:
            batch.append(frame)
        if self.pending_frames is None and all(type(part) is bytes or type(part) is ViewFrame for part in batch):
            # one write: a view in it takes the form the page needs now
            self.deliver(self.stream.joined(cast("list[bytes | ViewFrame]", batch)))
            return
        for part in batch:  # an async view rendering: each part in order, each view as its page needs it then
            if type(part) is bytes:
                self.deliver(part)
            else:
                self.deliver(b"", cast("ViewFrame | Awaitable[ViewFrame | None]", part))

    def apply_client_signals(self, values: Mapping[str, Any]) -> None:
        """Write the browser's values into the writable signals; other ids are ignored.

        A value is dropped when the browser posted it before it had seen the server's last write
        of that signal (its ``via_rev`` is older), so the server's write wins.
        """
        revisions = values.get(protocol.REVISION_SIGNAL)
        if type(revisions) is not dict:  # JSON gives a plain dict or something else
            revisions = {}
        signals = self._signals
        shared = self._shared
        for key, value in values.items():
            sig = signals.get(key)
            if sig is None:
                sig = shared.get(key)
                if sig is None or sig.value == value:
                    continue
            if not sig.writable:
                continue
            seen = revisions.get(key, 0)
            if type(seen) is not int:
                seen = 0
            if seen < sig.revision:
                continue  # posted before the server's write reached the browser
            if not isinstance(sig, SharedSignal):
                if seen > sig.revision:
                    sig.revision = seen  # a revived tab: the browser saw writes of an earlier process
                sig.acked = seen
            sig.accept_client_value(value)
