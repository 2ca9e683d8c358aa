"""Drive an App like a browser would, in-process, without sockets.

::

    client = TestClient(app)
    tab = client.open("/counter")      # page view + stream connect
    tab.click("#inc")                  # posts the element's @post action with the tab's signals
    assert tab.signals["count"] == 1
    client.clock.advance(60)           # timeouts run on a manual clock

Every call is plain (no ``await``): the client owns an event loop and runs async handlers on it.
Exceptions from user code re-raise in the test unless ``raise_server_exceptions=False``.

The package's modules: :mod:`~pyvia.testing.client` (the client, which speaks to the app),
:mod:`~pyvia.testing.tab` (a page and its stream), :mod:`~pyvia.testing.events` (the SSE events),
:mod:`~pyvia.testing.encoding` (content codings undone), :mod:`~pyvia.testing.html` (selector
queries) and :mod:`~pyvia.testing.patches` (Datastar's patches applied to a tab's page).
"""

from __future__ import annotations

from pyvia.testing.client import TestClient
from pyvia.testing.encoding import decoded_body as decoded_body
from pyvia.testing.events import Event
from pyvia.testing.events import parse_events as parse_events
from pyvia.testing.html import select as select
from pyvia.testing.tab import Tab
from pyvia.testing.tab import iter_events as iter_events

__all__ = ["Event", "Tab", "TestClient"]
