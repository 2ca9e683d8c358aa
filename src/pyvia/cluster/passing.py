"""Passing a browser's connection to the worker of this machine that holds its tab.

An action that reaches a worker which does not hold its tab used to be forwarded: the request went
to the owner over the direct channel (:mod:`pyvia.cluster.direct`) and the answer came back.
Measured, that costs 2.3-3.9x the CPU of a local action (``bench/RESULTS-2.md`` §7b): the landing
worker parses and answers HTTP as well, and both processes wake twice more for the channel's
writes. And it costs it again for each action, since the connection stays where it landed.

Workers of one machine can do better: the landing worker passes the TCP connection itself to the
owner (``SCM_RIGHTS`` on a unix datagram socket), with the request it already read rebuilt as bytes.
The owner answers it as its own request, and the browser's next actions on that keep-alive
connection reach the owner directly. A connection that carries the actions of tabs held by
different workers (several tabs of one browser, a proxy's pooled upstream connection) moves each
time the tab changes.

Only plain HTTP/1.1 connections move (a TLS session's state lives in the process that made it), and
only between requests: a connection with more bytes read or being written is forwarded instead,
as is anything that fails here (the owner's socket gone or full).

Each worker has one datagram socket, bound at ``<direct channel path>.pass`` in the same private
folder (a sender derives the path from the directory's entry). The sender keeps its own descriptor
of the connection, reading nothing, until the receiver answers: ``A`` (adopted: the sender lets go)
or ``N`` (refused, when it is stopping: the sender forwards after all). A receiver killed before
answering would take the connection with it; its direct channel closing tells the sender, which
then keeps the connection, so no request is lost either way.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Callable
from urllib.parse import quote

from pyvia.http import Request

__all__ = ["MAX_PREFACE", "ConnectionPost", "inbox_path", "request_bytes"]

log = logging.getLogger("pyvia.cluster")

#: The largest request passed with its connection; a larger one is forwarded (a datagram must
#: fit the socket's send buffer, 208 KB by default on Linux).
MAX_PREFACE = 64 * 1024

#: A message: its kind (``P`` a connection passed, ``A`` adopted, ``N`` refused) and its number.
_MESSAGE = struct.Struct("!cQ")

#: Seconds a sender waits for an answer before it keeps the connection (a receiver that died
#: is noticed sooner, by its direct channel closing; this only bounds the unforeseen).
ANSWER_TIMEOUT = 30.0

#: Headers not copied into the rebuilt request: its body is whole, so its length is given anew.
_DROPPED = frozenset(("content-length", "transfer-encoding", "expect"))


def inbox_path(direct_path: str) -> str:
    """Where the worker whose direct channel is at ``direct_path`` receives connections."""
    return f"{direct_path}.pass"


def request_bytes(request: Request) -> bytes | None:
    """``request`` as HTTP/1.1 bytes for the owner's parser; None when it is too large to pass."""
    if len(request.body) > MAX_PREFACE:
        return None
    target = quote(request.path, safe="/:@!$&'()*+,;=-._~")
    if request.query_string:
        target += "?" + request.query_string
    lines = [f"{request.method} {target} HTTP/1.1"]
    lines.extend(f"{name}: {value}" for name, value in request.headers if name.lower() not in _DROPPED)
    lines.append(f"content-length: {len(request.body)}\r\n\r\n")
    head = "\r\n".join(lines).encode("latin-1")
    data = head + request.body
    return data if len(data) <= MAX_PREFACE else None


class ConnectionPost:
    """This worker's end: passes connections to the other workers and receives theirs.

    ``adopt(sock, preface)`` serves a connection passed here; None refuses them (a worker not
    served by the native server over plain HTTP, or one that is stopping).
    """

    def __init__(self, path: str, adopt: Callable[[socket.socket, bytes], object] | None) -> None:
        self.path = path
        self.adopt = adopt
        self._sock: socket.socket | None = None
        self._next = 0
        self._waiting: dict[int, tuple[str, asyncio.Future[bool], asyncio.TimerHandle]] = {}

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # left by a worker that was killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(self.path)
            os.chmod(self.path, 0o600)
            sock.setblocking(False)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._receive)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def send(self, path: str, fd: int, preface: bytes) -> asyncio.Future[bool] | None:
        """Offer the connection ``fd`` with its request to the worker at ``path``.

        None when it could not be sent (the receiver is gone or its queue is full); else a future
        that says whether the receiver took it. Until it is done the caller must neither read nor
        write the connection; once it is True, the caller closes its descriptor and forgets it.
        """
        sock = self._sock
        if sock is None:
            return None
        self._next += 1
        number = self._next
        try:
            sock.sendmsg([_MESSAGE.pack(b"P", number), preface],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))], 0, path)
        except OSError as exc:
            log.debug("could not pass a connection to %s: %s", path, exc)
            return None
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        timer = loop.call_later(ANSWER_TIMEOUT, self._settle, number, False)
        self._waiting[number] = (path, answer, timer)
        return answer

    def peer_gone(self, path: str) -> None:
        """The worker at ``path`` is gone: the connections offered to it stay here."""
        for number, (to, _, _) in list(self._waiting.items()):
            if to == path:
                self._settle(number, False)

    def _settle(self, number: int, taken: bool) -> None:
        waiting = self._waiting.pop(number, None)
        if waiting is None:
            return
        path, answer, timer = waiting
        timer.cancel()
        if not taken and not answer.done():
            log.info("the worker at %s did not take a connection: it is answered here", path)
        if not answer.done():
            answer.set_result(taken)

    def _receive(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                data, fds, flags, sender = socket.recv_fds(sock, _MESSAGE.size + MAX_PREFACE, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("the connection post failed: %s", exc)
                return
            self._take(sock, data, fds, flags, sender)

    def _take(self, sock: socket.socket, data: bytes, fds: list[int], flags: int, sender: object) -> None:
        if len(data) < _MESSAGE.size or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            for fd in fds:
                os.close(fd)
            return
        kind, number = _MESSAGE.unpack_from(data)
        if kind in (b"A", b"N"):
            self._settle(number, kind == b"A")
            return
        if kind != b"P" or not fds:
            for fd in fds:
                os.close(fd)
            return
        conn = socket.socket(fileno=fds[0])
        adopt = self.adopt
        # the answer goes first: from it on, the connection is ours alone
        if not isinstance(sender, str) or not self._answer(sock, sender, b"A" if adopt else b"N", number):
            conn.close()
            return
        if adopt is None:
            conn.close()  # refused: the sender still holds it
            return
        try:
            adopt(conn, data[_MESSAGE.size:])
        except Exception:
            log.exception("could not serve a connection another worker passed")
            conn.close()

    @staticmethod
    def _answer(sock: socket.socket, to: str, kind: bytes, number: int) -> bool:
        try:
            sock.sendto(_MESSAGE.pack(kind, number), to)
        except OSError as exc:  # the sender is gone: it took its connection with it
            log.debug("could not answer %s: %s", to, exc)
            return False
        return True

    def stop(self) -> None:
        """Refuse what is still queued (the senders keep those), and stop."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # no new offers reach it
        self.adopt = None
        with contextlib.suppress(RuntimeError, ValueError):  # the loop may be closed already
            asyncio.get_running_loop().remove_reader(sock.fileno())
        while True:
            try:
                data, fds, flags, sender = socket.recv_fds(sock, _MESSAGE.size + MAX_PREFACE, 1)
            except OSError:
                break
            self._take(sock, data, fds, flags, sender)
        sock.close()
        for number in list(self._waiting):
            self._settle(number, False)
