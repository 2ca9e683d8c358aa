"""The functions every request, action, page view and broadcast runs keep no closure cells.

A ``lambda``, nested ``def`` or comprehension over a function's own variables makes them cells,
and CPython builds every cell at each call of the function, closure made or not. These are the
functions on the per-request path; one that gains a cell fails here (see "Rules the parts keep"
in docs/architecture.md for what to do instead).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

from pyvia import http, stream, tab_output, view_frame
from pyvia.broadcast import Broadcaster
from pyvia.context import Context
from pyvia.runtime import common
from pyvia.runtime.common import RequestKind
from pyvia.runtime.dispatch import Dispatch
from pyvia.runtime.endpoints.action import Actions
from pyvia.runtime.endpoints.page import Pages
from pyvia.runtime.endpoints.stream import Streams
from pyvia.server.connection import HttpProtocol
from pyvia.server.reader import RequestReader

HOT: list[Callable[..., Any]] = [
    common.then,
    common.settle,
    Dispatch.handle,
    Dispatch.dispatch,
    Dispatch.answer,
    Actions.relay,
    Actions.action,
    Actions.run,
    Actions.invoke,
    Actions.refuse_early,
    Actions.signals_of,
    Actions.response,
    Pages.page,
    Pages.response_once_loaded,
    Pages.after_loads,
    Pages.response,
    Pages.document,
    Streams.stream_for,
    Streams.response,
    Context.action,
    http.Headers.from_raw,
    http.Headers.get_lower,
    http.Headers.get_all,
    http.Headers.pack,
    RequestReader.feed,
    RequestReader.on_message_begin,
    RequestReader.on_header,
    RequestReader.on_headers_complete,
    RequestReader.on_message_complete,
    HttpProtocol.data_received,
    tab_output.TabOutput.end_batch,
    tab_output.TabOutput.deliver,
    stream.Stream.send,
    stream.Stream.inline,
    stream.Stream.pick,
    view_frame.view_root,
    view_frame.ViewFrame.of_view,
    Broadcaster._write,
]


def _code(fn: Callable[..., Any]) -> types.CodeType:
    fn = getattr(fn, "__func__", fn)  # a classmethod
    return fn.__code__  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("fn", HOT, ids=lambda fn: fn.__qualname__)
def test_no_cells(fn: Callable[..., Any]) -> None:
    cells = _code(fn).co_cellvars
    assert cells == (), f"{fn.__qualname__} makes {cells} cells at every call: pass them with functools.partial"


def test_the_check_sees_a_cell() -> None:
    def with_a_closure(value: int) -> Callable[[], int]:
        return lambda: value

    assert _code(with_a_closure).co_cellvars == ("value",)


ENUMS = {"RequestKind", "State", "Event", "ConnState"}


@pytest.mark.parametrize(
    "fn",
    [*HOT, Dispatch.finish, tab_output.TabOutput.render_view, tab_output.TabOutput.send_frame],
    ids=lambda fn: fn.__qualname__,
)
def test_no_enum_member_read_through_its_class(fn: Callable[..., Any]) -> None:
    # CPython 3.11 does not specialize ``RequestKind.ACTION`` (EnumType defines __getattr__): about
    # 150 ns a read, seven times a global's ("Rules the parts keep" in docs/architecture.md)
    through = ENUMS & set(_code(fn).co_names)
    assert not through, f"{fn.__qualname__} reads members through {through}: use the module's names (KIND_ACTION, ...)"


def _reads_through_the_class(kind: object) -> bool:
    return kind == common.RequestKind.ACTION or kind == RequestKind.PAGE


def test_the_enum_check_sees_a_read_through_the_class() -> None:
    assert ENUMS & set(_code(_reads_through_the_class).co_names) == {"RequestKind"}
