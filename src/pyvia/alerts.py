"""The error channel: what a user sees when a request of their tab fails, with no JavaScript to write.

Every page carries one alert (``role="alert"``, dismissable) driven by three signals:

* ``_via_error``: a message the server chose, sent on the tab's stream when it refused or failed
  an action it could attribute to the tab (a value too large, a bad argument, a rate limit with
  its wait, an error raised with :class:`~pyvia.errors.UserError`, a failing action); cleared by
  the server when the tab's next action succeeds;
* ``_via_failed``: the HTTP status of the last request of the page that failed, set in the browser
  from Datastar's fetch events, for what the server could not tell the tab (a shed request, an
  upload refused before it reached the app, a tab the server no longer holds); cleared when the
  page makes its next request;
* ``_via_lost``: the stream is down and Datastar is reconnecting; cleared by the next stream's
  first frame.

The message shown is the words for a lost connection while it is lost (what is true now, before
what failed earlier), else ``_via_error`` if set, else the words for ``_via_failed``'s status.
The words and the look are the app's to replace (``App(error_messages=..., error_view=...)``,
per page ``@app.page(..., error_messages=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from markupsafe import Markup

from pyvia.errors import ConfigError
from pyvia.markup import html
from pyvia.protocol import seed_json

__all__ = ["DEFAULT_MESSAGES", "ErrorChannel", "ErrorView", "alert_markup", "messages_for"]

ERROR_SIGNAL = "_via_error"
FAILED_SIGNAL = "_via_failed"
LOST_SIGNAL = "_via_lost"

#: What the user reads, by HTTP status, plus ``lost`` (reconnecting), ``waiting`` (an action not
#: answered yet), ``gone`` (the page cannot be revived: reload it) and ``default`` (any other failure).
DEFAULT_MESSAGES: dict[str, str] = {
    "400": "The page sent something the server could not read.",
    "403": "That is not allowed.",
    "404": "That is no longer there.",
    "409": "The page lost its connection to the server. Try again in a moment.",
    "413": "What you sent is too large.",
    "429": "Too many requests. Wait a moment, then try again.",
    "500": "Something went wrong on the server.",
    "503": "The server is busy. Try again in a moment.",
    "504": "The server took too long to answer. Try again.",
    "lost": "Connection lost. Reconnecting…",
    "waiting": "Still waiting for the server…",
    "gone": "This page is out of date. Reload it to go on.",
    "default": "The request failed. Try again.",
}


def messages_for(
    overrides: Mapping[str | int, str] | None, base: Mapping[str, str] = DEFAULT_MESSAGES
) -> dict[str, str]:
    """``base`` with ``overrides`` (keys: a status as int or str, or lost / gone / default)."""
    out = dict(base)
    for key, text in (overrides or {}).items():
        name = str(key)
        if not (name.isdigit() and 400 <= int(name) <= 599) and name not in ("lost", "waiting", "gone", "default"):
            raise ConfigError(
                f"error_messages key {key!r}: a status from 400 to 599, 'lost', 'waiting', 'gone' or 'default'"
            )
        if not isinstance(text, str):
            raise ConfigError(f"error_messages[{key!r}] must be a str, not {type(text).__name__}")
        out[name] = text
    return out


@dataclass(frozen=True, slots=True)
class ErrorChannel:
    """The Datastar expressions an error view binds: ``show`` (is there a message), ``text`` (the
    message), ``dismiss`` (hide it) and ``reload`` (reload the page, for ``gone``)."""

    show: str
    text: str
    dismiss: str
    reload: str = "window.location.reload()"


ErrorView = Callable[[ErrorChannel], str]


def channel(messages: Mapping[str, str]) -> ErrorChannel:
    words = seed_json(dict(messages))  # the app's words, safe inside a Datastar expression
    # ``$_via_failed`` is a status; 0 (or missing) means no failed request. The words are written
    # once, as the argument of an arrow function: every page carries them.
    text = (
        f"(m => ($_via_lost ? m.lost : '') || ${ERROR_SIGNAL} "
        f"|| ($_via_failed ? m[$_via_failed] || m.default : ''))({words})"
    )
    return ErrorChannel(
        show=f"!!(${ERROR_SIGNAL} || $_via_failed || $_via_lost)",
        text=text,
        dismiss=f"${ERROR_SIGNAL} = ''; $_via_failed = 0",
    )


def default_view(e: ErrorChannel) -> str:
    return html(
        '<div id="via-alert" role="alert" data-show="{show}" style="display:none;position:fixed;left:50%;bottom:1rem;'
        "transform:translateX(-50%);z-index:2147483000;max-width:min(40rem,90vw);padding:.6rem 2.4rem .6rem 1rem;"
        "border-radius:.4rem;background:#7f1d1d;color:#fff;font:14px/1.4 system-ui,sans-serif;"
        'box-shadow:0 2px 12px rgba(0,0,0,.3)">'
        '<span data-text="{text}"></span>'
        '<button type="button" aria-label="Dismiss" data-on:click="{dismiss}" style="position:absolute;right:.4rem;'
        'top:.3rem;background:none;border:0;color:inherit;font-size:1.2rem;cursor:pointer">&times;</button></div>',
        show=e.show,
        text=e.text,
        dismiss=e.dismiss,
    )


def alert_markup(messages: Mapping[str, str], view: ErrorView | None = None) -> str:
    """The alert element of a page: the app's view of the channel, or the default one."""
    e = channel(messages)
    return str(Markup(view(e)) if view is not None else default_view(e))


#: Seconds an action goes unanswered before the page says it is waiting for the server.
WAITING_AFTER = 5
#: What the page does with Datastar's fetch events (on its boot element, ``el``): a failed request of
#: the page shows its status; a request started after it hides it, and so does the answer of one
#: (requests overlap: a failure answered after a later request started shows until that one is
#: answered, then goes, as the server's own words do); a request unanswered for ``WAITING_AFTER`` s,
#: or sent again after a network error (the server is down), shows ``waiting`` until its answer,
#: and one Datastar gave up on the default words; a stream that retries shows the tab as lost.
#: Requests are numbered as they start (Datastar runs one request of an element at a time); the
#: properties, short since every page carries them: on the requesting element ``vn`` its number,
#: ``vx`` it failed, ``vw`` its waiting timer; on ``el`` ``vn`` the last number given, ``vd`` the
#: newest request answered, ``vf`` the one whose failure shows.
FETCH_EVENTS = (
    "const d = evt.detail, t = d.type, r = d.el; "
    "if (!(r.id || '').startsWith('via-')) { clearTimeout(r.vw); "
    "if (t === 'started') { $_via_failed = 0; r.vn = el.vn = (el.vn | 0) + 1; r.vx = 0; "
    f"r.vw = setTimeout(() => {{ $_via_failed = $_via_failed || 'waiting' }}, {WAITING_AFTER * 1000}) }} "
    "else if (t === 'retrying') { $_via_failed = $_via_failed || 'waiting' } "
    "else if (t !== 'finished') { r.vx = 1; "
    "if (r.vn > (el.vd | 0)) { $_via_failed = t === 'error' ? +d.argsRaw.status : 'default'; el.vf = r.vn } } "
    "else if (!r.vx) { el.vd = Math.max(el.vd | 0, r.vn); "
    "if ($_via_failed === 'waiting' || (el.vf | 0) < r.vn) { $_via_failed = 0 } } } "
    "else if (t === 'retrying' || t === 'error') "
    "{ $_disconnected = true; $_via_lost = true; $_via_filter = %s }"
)
