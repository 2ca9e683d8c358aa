"""Passing a browser's connection to the worker of this machine that holds its tab.

An action that reaches a worker which does not hold its tab used to be forwarded: the request went
to the owner over the direct channel (:mod:`pyvia.cluster.direct`) and the answer came back.
Measured, that cost several times the CPU of a local action (``bench/RESULTS-2.md`` §7b): the landing
worker parses and answers HTTP as well, and both processes wake once more each way. And it costs
that again for each action, since the connection stays where it landed.

Workers of one machine can do better: the landing worker passes the TCP connection itself to the
owner (``SCM_RIGHTS`` on a unix seqpacket socket), with the request it already read rebuilt as
bytes. The owner answers it as its own request, and the browser's next actions on that keep-alive
connection reach the owner directly (about the cost of a local action, measured). A connection moves once
at most: one that carries the actions of tabs held by different workers (several tabs of one
browser) would otherwise go back and forth, and a move costs about two forwarded actions. A
proxy's connection, which carries many browsers' requests, never moves (the caller forwards).

Only plain HTTP/1.1 connections move (a TLS session's state lives in the process that made it), and
only between requests: a connection with more bytes read or being written is forwarded instead,
as is anything that fails here (the owner's socket gone or full). A stream is offered *balanced*:
a receiver holding more connections than the sender refuses it, and the sender takes the tab over.

Each worker listens at ``<direct channel path>.pass`` in the same private folder (a sender
derives the path from the directory's entry); a sender keeps one connection to each receiver it
offered to. (Seqpacket, not datagrams: a datagram socket holds only ``net.unix.max_dgram_qlen``
messages, 10 by default, and a full queue lost answers.) The sender keeps its own descriptor of
the browser's connection, reading nothing, until the receiver answers: ``A`` (adopted: the sender
lets go) or ``N`` (refused: busier, or stopping; the sender keeps it). A receiver that dies before
answering closes the channel, which tells the sender to keep the connection: no request is lost
either way.
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

#: The largest request passed with its connection; a larger one is forwarded (a message must fit
#: the socket's send buffer, 208 KB by default on Linux).
MAX_PREFACE = 64 * 1024

#: A message: its kind (``P`` a connection passed, ``A`` adopted, ``N`` refused), its number, and
#: in an offer the sender's open connections (-1: take it whatever your load).
_MESSAGE = struct.Struct("!cQq")

#: Connections a receiver may hold above the sender's and still take a balanced offer (a stream):
#: a busier one refuses, and the sender takes the tab over instead, as the balanced accept would
#: have it (pyvia.server.balance).
LOAD_SLACK = 1

#: Seconds a sender waits for an answer before it keeps the connection (a receiver that died
#: is noticed at once, by its channel closing; this only bounds the unforeseen).
ANSWER_TIMEOUT = 30.0

#: Seconds between looks at the answers while some are owed. The answers are not watched: a
#: sender that has nothing else to do would wake for each one, which costs more on a small VM
#: than the whole pass (the sender only closes its descriptor then); 5 ms is what a refused
#: connection waits at most before it is answered here.
ANSWER_READ_DELAY = 0.005

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


class _Channel:
    """One seqpacket connection between two workers' posts (offers one way, answers the other)."""

    __slots__ = ("path", "sock")

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path


class ConnectionPost:
    """This worker's end: passes connections to the other workers and receives theirs.

    ``adopt(sock, preface)`` serves a connection passed here; None refuses them (a worker not
    served by the native server over plain HTTP, or one that is stopping). ``load()``, when given,
    is this worker's open connections, told with balanced offers and compared with theirs.
    """

    def __init__(
        self, path: str, adopt: Callable[[socket.socket, bytes], object] | None, load: Callable[[], int] | None = None
    ) -> None:
        self.path = path
        self.adopt = adopt
        self.load = load
        self._listener: socket.socket | None = None
        self._out: dict[str, _Channel] = {}  # receiver's path -> the channel offers go on
        self._in: set[_Channel] = set()  # channels other workers offer on
        self._next = 0
        self._waiting: dict[int, tuple[_Channel, asyncio.Future[bool], asyncio.TimerHandle]] = {}
        self._reading: asyncio.TimerHandle | None = None  # the next look at the answers

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # left by a worker that was killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.bind(self.path)
            os.chmod(self.path, 0o600)
            sock.listen(64)
            sock.setblocking(False)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept)
        except BaseException:
            sock.close()
            raise
        self._listener = sock

    # --- offering ---------------------------------------------------------------------------------

    def send(self, path: str, fd: int, preface: bytes, *, balanced: bool = False) -> asyncio.Future[bool] | None:
        """Offer the connection ``fd`` with its request to the worker at ``path``.

        None when it could not be sent (the receiver is gone, or its queue is full); else a
        future that says whether the receiver took it. Until it is done the caller must neither
        read nor write the connection; once it is True, the caller closes its descriptor.
        ``balanced``: the receiver refuses it when it holds more connections than this worker
        (by more than :data:`LOAD_SLACK`).
        """
        if self._listener is None:
            return None
        channel = self._out.get(path) or self._connect(path)
        if channel is None:
            return None
        self._next += 1
        number = self._next
        try:
            load = self.load() if balanced and self.load is not None else -1
            channel.sock.sendmsg(
                [_MESSAGE.pack(b"P", number, load), preface],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
            )
        except OSError as exc:
            log.debug("could not pass a connection to %s: %s", path, exc)
            if not isinstance(exc, BlockingIOError):
                self._close_out(channel)
            return None
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        timer = loop.call_later(ANSWER_TIMEOUT, self._settle, number, False)
        self._waiting[number] = (channel, answer, timer)
        if self._reading is None:
            self._reading = loop.call_later(ANSWER_READ_DELAY, self._read_answers)
        return answer

    def _connect(self, path: str) -> _Channel | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except OSError as exc:  # nobody there (a killed worker leaves its file), or a full backlog
            log.debug("no connection post at %s: %s", path, exc)
            sock.close()
            return None
        channel = _Channel(sock, path)
        self._out[path] = channel
        return channel

    def _read_answers(self) -> None:
        """Read the answers that came in since the last look; look again while some are owed."""
        self._reading = None
        for channel in list(self._out.values()):
            while True:
                try:
                    data = channel.sock.recv(_MESSAGE.size)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if len(data) != _MESSAGE.size:  # closed: the receiver is gone, or stopped
                    self._close_out(channel)
                    break
                kind, number, _ = _MESSAGE.unpack(data)
                self._settle(number, kind == b"A")
        if self._waiting and self._listener is not None:
            self._reading = asyncio.get_running_loop().call_later(ANSWER_READ_DELAY, self._read_answers)

    def _close_out(self, channel: _Channel) -> None:
        """What was offered on ``channel`` and not answered stays here."""
        if self._out.get(channel.path) is channel:
            del self._out[channel.path]
        channel.sock.close()
        for number, (on, _, _) in list(self._waiting.items()):
            if on is channel:
                self._settle(number, False)

    def _settle(self, number: int, taken: bool) -> None:
        waiting = self._waiting.pop(number, None)
        if waiting is None:
            return
        channel, answer, timer = waiting
        timer.cancel()
        if not taken:
            log.debug("the worker at %s did not take a connection: it is answered here", channel.path)
        if not answer.done():
            answer.set_result(taken)

    # --- receiving --------------------------------------------------------------------------------

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("the connection post could not accept: %s", exc)
                return
            sock.setblocking(False)
            channel = _Channel(sock, "")
            self._in.add(channel)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._read_offers, channel)

    def _read_offers(self, channel: _Channel) -> None:
        while channel in self._in:
            try:
                data, fds, flags, _ = socket.recv_fds(channel.sock, _MESSAGE.size + MAX_PREFACE, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds, flags = b"", [], 0
            if not data:
                self._close_in(channel)  # the sender is gone
                return
            self._take(channel, data, fds, flags)

    def _take(self, channel: _Channel, data: bytes, fds: list[int], flags: int) -> None:
        if len(data) < _MESSAGE.size or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            self._close_in(channel)  # not from a sender of this module
            return
        kind, number, their_load = _MESSAGE.unpack_from(data)
        conn = socket.socket(fileno=fds[0])
        adopt = self.adopt
        taken = kind == b"P" and adopt is not None
        if taken and their_load >= 0 and self.load is not None and self.load() > their_load + LOAD_SLACK:
            taken = False  # busier than the sender: the tab is better off there
        try:  # the answer goes first: from it on, the connection is ours alone
            channel.sock.send(_MESSAGE.pack(b"A" if taken else b"N", number, 0))
        except OSError as exc:
            # Unanswered, the sender keeps it: closing the channel tells it so.
            log.debug("could not answer a passed connection: %s", exc)
            conn.close()
            self._close_in(channel)
            return
        if not taken or adopt is None:
            conn.close()  # refused: the sender still holds it
            return
        try:
            adopt(conn, data[_MESSAGE.size :])
        except Exception:
            log.exception("could not serve a connection another worker passed")
            conn.close()

    def _close_in(self, channel: _Channel) -> None:
        self._in.discard(channel)
        with contextlib.suppress(RuntimeError, ValueError, OSError):
            asyncio.get_running_loop().remove_reader(channel.sock.fileno())
        channel.sock.close()

    def stop(self) -> None:
        """Refuse what is still queued (the senders keep those) and close every channel."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.adopt = None
        with contextlib.suppress(RuntimeError, ValueError, OSError):
            asyncio.get_running_loop().remove_reader(listener.fileno())
        listener.close()
        for channel in list(self._in):
            self._read_offers(channel)  # answered "N"
            self._close_in(channel)
        if self._reading is not None:
            self._reading.cancel()
        self._read_answers()  # what was answered already was taken
        for channel in list(self._out.values()):
            self._close_out(channel)
        for number in list(self._waiting):
            self._settle(number, False)
