"""Requests for a tab another worker holds. A request for a tab held by another worker of this
machine hands the browser's connection to it (:mod:`pyvia.cluster.passing`); otherwise an action
is forwarded to its owner, over that worker's unix socket when it is a worker of this machine,
else over its TCP channel when it serves one, else (or when that channel fails) by request/reply
on ``fwd.<node>``, and answered as if local, and a stream takes the tab over (the owner hands its
tab state over and lets it go). When the owner is gone (no responders) the tab is revived where
the request landed. Once a worker knows a tab's owner, it relays the tab's later actions on an
open channel straight from ``App.handle`` (:meth:`Forwarding.relay`: no task, no dispatch); the
owner checks them (Origin, rate limit) as it does every action it runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from pyvia.cluster import CLUSTER_ADDRESS_ENV, WORKER_ID_ENV, WORKERS_ENV
from pyvia.cluster.base import EngineError, NoResponders, RemoteError, RequestTimeout
from pyvia.cluster.direct import DirectClient, DirectServer, Unreachable, channel_key, socket_path
from pyvia.cluster.parts import DIRECTORY, Part
from pyvia.cluster.passing import ConnectionPost, inbox_path, request_bytes
from pyvia.config import cluster_host_port
from pyvia.http import Headers, Request, Response, StreamResponse

if TYPE_CHECKING:
    from pyvia.cluster.link import ClusterLink

__all__ = ["Forwarding"]

log = logging.getLogger("pyvia.cluster")

_OWNER_CACHE = 65_536  # directory entries remembered by a worker that forwards
_OWNER_CHECK = 1.0  # a forwarded request unanswered this long checks that its owner is alive


def _forwarded(ctx_id: str, request: Request) -> bytes:
    """A request for the owner of tab ``ctx_id`` (see :meth:`Forwarding._serve_direct`)."""
    message: dict[str, object] = {
        "op": "request",
        "x": ctx_id,
        "m": request.method,
        "p": request.path,
        "q": request.query_string,
        "h": list(request.headers),
        "b": request.body.decode("latin-1"),
        "c": request.client,
        "s": request.scheme,
    }
    if request.signals is not None and request.form is None:
        message["g"] = request.signals  # parsed here already: not again there
    return orjson.dumps(message)


def _response(reply: dict[str, Any]) -> Response | None:
    """The response in an owner's reply (:func:`_reply`); None when it no longer holds the tab."""
    if "moved" in reply:
        return None
    return Response(reply["status"], [tuple(h) for h in reply["headers"]], reply["body"].encode("latin-1"))


def _reply(result: object) -> bytes:
    if not isinstance(result, Response):  # a stream: never for an action
        return orjson.dumps({"status": 500, "headers": [], "body": ""})
    return orjson.dumps(
        {"status": result.status, "headers": list(result.headers), "body": bytes(result.body).decode("latin-1")}
    )


def _through_proxy(request: Request) -> bool:
    """A proxy's connection carries the requests of many browsers, whose tabs live on any
    worker: passed, it would move at nearly every request (each move costs more than forwarding)."""
    headers = request.headers
    return "x-forwarded-for" in headers or "forwarded" in headers or "via" in headers


class Forwarding(Part):
    """This node's channels (the engine subject, a unix socket, TCP), the owners it knows, and
    the requests it passes, forwards, relays and serves."""

    __slots__ = ("_direct", "_key", "_owners", "_peers", "_post", "_tcp", "stopping")

    def __init__(self, link: ClusterLink) -> None:
        super().__init__(link)
        self._owners: OrderedDict[str, str] = OrderedDict()  # ctx id -> node, as last read
        self._direct: DirectServer | None = None  # on a unix socket, for the workers of this machine
        self._tcp: DirectServer | None = None  # on TCP, for the other machines (``cluster_address``)
        self._key = b""  # what a TCP channel's handshake proves (channel_key)
        self._peers: dict[str, DirectClient | None] = {}  # node -> its direct channel (None: the engine)
        self._post: ConnectionPost | None = None  # passes connections to the other workers, takes theirs
        #: :meth:`drain` ended: forwarded actions are answered "moved".
        self.stopping = False

    async def start(self) -> None:
        """Serve this node's forwarding subject and direct channels; the link's address follows."""
        self._subs.append(await self.engine.serve(f"fwd.{self.node}", self._serve))
        self._key = channel_key(self.app.secret, self.app.config.engine_prefix)
        path = await self._serve_unix() if self.app.config.cluster_direct else None
        tcp = await self._serve_tcp()
        self.link.address = f"{self.node} {tcp or '-'} {path or '-'}"

    async def _serve_unix(self) -> str | None:
        """Serve the direct channel to this machine's workers, and take the connections they pass."""
        try:
            path = socket_path(self.app.config.engine_prefix, self.node)
            server = DirectServer(path, self._serve_direct)
            await server.start()
        except OSError as exc:
            log.warning("no direct channel between this machine's workers (actions go through the engine): %s", exc)
            return None
        self._direct = server
        # adopt_connection: set when served by the native server over plain HTTP
        adopt = self.app.adopt_connection
        post = ConnectionPost(inbox_path(path), adopt, getattr(adopt, "load", None))
        try:
            post.start()
        except OSError as exc:
            log.warning("this worker cannot pass connections to the others (it forwards): %s", exc)
        else:
            self._post = post
        return path

    async def _serve_tcp(self) -> str | None:
        """Serve the direct channel to other machines at ``cluster_address``: ``host:port`` to
        advertise, or None. With a port, worker ``i`` of ``n`` takes ``port + i``, else (its
        predecessor still drains in a reload) ``port + n + i``; without, any free port."""
        setting = self.app.config.cluster_address or os.environ.get(CLUSTER_ADDRESS_ENV)
        if not setting:
            return None
        host, port = cluster_host_port(setting)
        index, count = int(os.environ.get(WORKER_ID_ENV, 0)), int(os.environ.get(WORKERS_ENV, 1))
        error: Exception | None = None
        for candidate in (port + index, port + count + index) if port else (0,):
            server = DirectServer((host, candidate), self._serve_direct, self._key)
            try:
                await server.start()
            except (OSError, OverflowError) as exc:
                error = exc
                continue
            self._tcp = server
            bound = server.address[1]
            return f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
        log.warning(
            "no direct channel to other machines on %s (actions from them go through the engine): %s", setting, error
        )
        return None

    def stop_taking_connections(self) -> None:
        """Refuse the connections other workers pass from now on (the app is draining): their
        senders keep them."""
        if self._post is not None:
            self._post.adopt = None

    async def drain(self) -> None:
        """Finish what the other workers sent (2 s at most), then take no more of it."""
        if self._post is not None:
            self._post.stop()
            self._post = None
        for server in (self._direct, self._tcp):
            if server is not None:
                await server.drain(2.0)
        self.stopping = True
        for server in (self._direct, self._tcp):
            if server is not None:
                await server.drain(1.0)  # those that came during the first wait

    async def stop(self) -> None:
        await super().stop()
        for server in (self._direct, self._tcp):
            if server is not None:
                await server.stop()
        self._direct = self._tcp = None
        for client in self._peers.values():
            if client is not None:
                client.close()

    async def owner(self, ctx_id: str, *, cached: bool = True) -> str | None:
        """The node holding ``ctx_id`` when it is another one, else None.

        Owners are remembered (a tab's later actions skip the directory read); an owner that no
        longer holds the tab says so and the entry is read again (see :meth:`forward`).
        """
        if cached:
            node = self._owners.get(ctx_id)
            if node is not None:
                return node
        started = time.perf_counter()
        try:
            value, _ = await self.engine.get(DIRECTORY, ctx_id)
        except EngineError:
            return None
        self.app.metrics.observe_engine(time.perf_counter() - started)
        if value is None:
            return None
        node, _, channels = value.decode(errors="replace").partition(" ")
        if node not in self._peers:
            self._peers[node] = self._peer(channels)
        if node == self.node:
            return None
        self._owners[ctx_id] = node
        if len(self._owners) > _OWNER_CACHE:
            self._owners.popitem(last=False)
        return node

    def _peer(self, channels: str) -> DirectClient | None:
        """The direct channel to a node, from its directory entry (module docstring): its unix
        socket when it is a worker of this machine, else its TCP address, else None (the engine)."""
        tcp, _, path = channels.partition(" ")
        if path not in ("", "-") and os.path.exists(path):
            return DirectClient(path)
        host, _, port = tcp.rpartition(":")
        return DirectClient((host.strip("[]"), int(port)), self._key) if host and port.isdigit() else None

    async def pass_connection(self, owner: str, request: Request, *, balanced: bool = False) -> bool:
        """Pass the request's connection to ``owner`` when it is a worker of this machine
        (:mod:`pyvia.cluster.passing`): True once it has it and answers; False to forward.
        ``balanced``: only if that worker is not busier than this one (a stream, which may as
        well take the tab over). A connection passed here once has no ``transfer``: it moves once."""
        post, direct = self._post, self._peers.get(owner)
        transfer = request.transfer
        if post is None or direct is None or transfer is None or not self._movable(direct, request):
            return False
        assert isinstance(direct.address, str)  # _movable: a worker of this machine
        preface = request_bytes(request)
        if preface is None:
            return False
        path = inbox_path(direct.address)
        return await transfer(lambda fd: post.send(path, fd, preface, balanced=balanced))

    def _movable(self, direct: DirectClient, request: Request) -> bool:
        """Whether the request's connection can move to that worker: not if it is another
        machine's, if the connection cannot move, or if it is a proxy's."""
        return (
            self._post is not None
            and isinstance(direct.address, str)
            and request.transfer is not None
            and not _through_proxy(request)
        )

    def relay(
        self, ctx_id: str, request: Request, timeout: float, answer: Callable[[Response | Exception | None], None]
    ) -> bool:
        """Send an action for a tab another node holds straight to it, when this worker knows
        which node, has its channel open, and the connection should not move there instead.
        ``answer`` gets the response, None when that node no longer holds the tab or is gone
        (the caller takes the long way: :meth:`forward`, or a revival), or the failure.
        False when nothing was sent. No task nor coroutine: the hot path behind a proxy."""
        owner = self._owners.get(ctx_id)
        direct = self._peers.get(owner) if owner is not None else None
        if direct is None or self._movable(direct, request):
            return False

        def replied(result: bytes | Exception) -> None:
            if isinstance(result, bytes):
                response = _response(orjson.loads(result))
            elif isinstance(result, TimeoutError):
                answer(RequestTimeout(f"no answer from worker {owner} within {timeout} s"))
                return
            elif isinstance(result, ConnectionError):
                response = None  # it is gone
            else:
                answer(RemoteError(str(result)))
                return
            if response is None:
                self._owners.pop(ctx_id, None)
            answer(response)

        if not direct.send(_forwarded(ctx_id, request), timeout, replied):
            return False
        self._count_sent(direct)
        return True

    def _count_sent(self, direct: DirectClient) -> None:
        self.app.metrics.forwarded("unix" if isinstance(direct.address, str) else "tcp")

    async def forward(self, ctx_id: str, request: Request, timeout: float) -> Response | None:
        """Answer ``request`` on the node holding ``ctx_id``; None when no live node holds it
        (the caller revives the tab here)."""
        payload = _forwarded(ctx_id, request)
        for cached in (True, False):
            owner = await self.owner(ctx_id, cached=cached)
            if owner is None:
                return None
            reply = await self._ask(owner, payload, timeout)
            if reply is not None:
                return reply
            self._owners.pop(ctx_id, None)  # gone, or the tab moved on: read the directory again
        return None

    async def _ask(self, owner: str, payload: bytes, timeout: float) -> Response | None:
        """The owner's answer to a forwarded request; None when the owner is gone or no longer
        holds the tab."""
        direct = self._peers.get(owner)
        if direct is not None:  # a worker of this machine, or a node serving TCP: straight to it
            try:
                raw = await direct.request(payload, timeout)
            except Unreachable:
                pass  # its TCP channel fails (nothing was sent): through the engine
            except ConnectionError:
                return None  # it is gone (a killed worker leaves its socket file behind)
            except TimeoutError:
                self._count_sent(direct)
                raise RequestTimeout(f"no answer from worker {owner} within {timeout} s") from None
            except RuntimeError as exc:
                self._count_sent(direct)
                raise RemoteError(str(exc)) from None
            else:
                self._count_sent(direct)
                return _response(orjson.loads(raw))
        self.app.metrics.forwarded("engine")
        task = asyncio.ensure_future(self.engine.request(f"fwd.{owner}", payload, timeout))
        try:
            # A request sent in the instant its owner died is lost without a "no responders"
            # (Redis delivered it to the dead connection): check that the owner still answers.
            while not (await asyncio.wait([task], timeout=_OWNER_CHECK))[0]:
                if not await self.answers(owner):
                    task.cancel()
                    return None
            return _response(orjson.loads(task.result()))
        except NoResponders:
            return None

    async def answers(self, owner: str) -> bool:
        """Whether someone answers on the node's subject (busy or unsure counts as yes)."""
        try:
            await self.engine.request(f"fwd.{owner}", b'{"op":"ping"}', _OWNER_CHECK)
        except NoResponders:
            return False
        except EngineError:
            return True  # busy or unsure: keep waiting for the answer
        return True

    async def take_over(self, owner: str, ctx_id: str, session_hash: str) -> dict[str, Any] | None:
        """Ask ``owner`` to let the tab go; its tab state, or None when the owner is gone or refused."""
        payload = orjson.dumps({"op": "handover", "id": ctx_id, "session": session_hash, "to": self.link.address})
        direct = self._peers.get(owner)
        try:
            raw = None
            if direct is not None:  # a worker of this machine or a node serving TCP: not the broker
                with contextlib.suppress(Unreachable):
                    raw = await direct.request(payload, 5.0)
            if raw is None:
                raw = await self.engine.request(f"fwd.{owner}", payload, 5.0)
        except (EngineError, ConnectionError, TimeoutError, RuntimeError) as exc:
            log.info("takeover of a tab from node %s failed (%s): reviving it here", owner, type(exc).__name__)
            return None
        reply = orjson.loads(raw)
        state = reply.get("tab_state")
        return state if isinstance(state, dict) else None

    async def _serve(self, payload: bytes) -> bytes:
        """Requests through the broker: forwarded actions, handovers, pings."""
        reply = self._serve_direct(payload)
        return reply if isinstance(reply, bytes) else await reply

    def _serve_direct(self, payload: bytes) -> bytes | Awaitable[bytes]:
        """A forwarded request, answered at once when the action is synchronous (no task)."""
        message = orjson.loads(payload)
        op = message.get("op")
        if op == "ping":
            return b"{}"
        if op == "handover":
            return self._hand_over(message)
        if message["x"] not in self.app.contexts or self.stopping:
            return b'{"moved":1}'  # the sender's directory entry was old, or this worker is going
        request = Request(
            method=message["m"],
            path=message["p"],
            query_string=message["q"],
            headers=Headers.from_lowered(message["h"]),
            body=message["b"].encode("latin-1"),
            client=message["c"],
            scheme=message["s"],
        )
        if "g" in message:
            request.signals = message["g"]
        result = self.app.runtime.dispatch.handle_forwarded(request, message["x"])
        if isinstance(result, Response | StreamResponse):  # a stream: never for an action
            return _reply(result)
        return self._reply_later(result)

    @staticmethod
    async def _reply_later(pending: Awaitable[Any]) -> bytes:
        return _reply(await pending)

    async def _hand_over(self, message: dict[str, Any]) -> bytes:
        ctx_id = message["id"]
        state = self.app.runtime.revival.hand_over(ctx_id, message["session"])
        if state is not None:  # before answering, so no request finds the tab nowhere meanwhile
            await self.engine.put(DIRECTORY, ctx_id, str(message["to"]).encode())
        return orjson.dumps({"tab_state": state})
