"""ASGI applications for servers started as subprocesses (``granian ... tests.asgi.apps:counter``)."""

from __future__ import annotations

from examples.counter import app as counter_app

from pyvia.asgi import asgi

counter = asgi(counter_app)
