"""A login-protected area: a public login page, pages under ``/area`` guarded by middleware.

- Any user name with the password ``pyvia`` logs in. The form is posted as a form
  (``contentType: 'form'``), so the password never becomes a signal that the page would send
  again with every request.
- Login rotates the session (``c.regenerate_session()``): an id planted in the browser before
  login never becomes a logged-in one. The user is kept in the server-side session data, which
  lives in this process: a restart logs everyone out (open tabs go back to the login page)
  unless the app saves its state (``App(persist_path=...)``, docs/deployment.md) or, as a real
  app should, keeps logins in its database (docs/security.md).
- The middleware of the ``/area`` group runs around every request of those pages: page views
  (redirected to the login page without a user), streams, revivals and actions (answered 403).
- Logout clears the session data and rotates the session again. A tab of the area still open
  elsewhere then has its actions refused; the page notices the 403 and says so.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any

from pyvia import App, Context, Markup, Request, Response, html, raw

PASSWORD = "pyvia"
MAX_NOTE = 200  # characters of a note

app = App(
    title="Login",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 36rem; }
  form { display: grid; gap: .6rem; max-width: 20rem; }
  nav { display: flex; gap: 1rem; align-items: center; margin-bottom: 1rem; }
  #error, #refused { color: #b00020; }
  #refused { border: 1px solid #b00020; padding: .5rem; border-radius: 4px; }
</style>"""
    ],
)


def require_user(request: Request, call_next: Callable[[Request], Any]) -> Any:
    """Let a request through only for a session with a user, on every kind of request."""
    session_id = app.session_id(request)
    user = app.session_data(session_id).get("user") if session_id else None
    if user is None:
        if request.kind == "page":
            return Response(303, [("location", app.url("/"))])
        return Response.text("Log in first", 403)  # actions, streams, revivals
    request.state["user"] = user
    return call_next(request)


def logout(c: Context) -> None:
    """An action of every page that shows a logout button (``c.action(logout, "logout")``)."""
    c.session_data.clear()
    c.regenerate_session()
    c.redirect(app.url("/"))


@app.page("/")
def login_page(c: Context) -> None:
    user = c.session_data.get("user")
    error = c.signal("", "error")

    @c.action
    def login() -> None:
        name = str(c.input("username", "")).strip()[:30]
        password = str(c.input("password", ""))
        if not name or not hmac.compare_digest(password.encode(), PASSWORD.encode()):
            error.value = "Wrong user name or password."
            return
        c.regenerate_session()  # a new session id for the logged-in browser
        c.session_data["user"] = name
        c.session_data["since"] = time.strftime("%H:%M:%S")
        c.redirect(app.url("/area"))

    log_out = c.action(logout, "logout")

    def view() -> Markup:
        if user is not None:
            return html(
                """
<main>
  <h1>Login</h1>
  <p id="who">You are logged in as <b>{user}</b>.</p>
  <nav><a id="to-area" href="{area}">Go to the area</a>
    <button id="logout" data-on:click="{log_out}">Log out</button></nav>
</main>""",
                user=user,
                area=app.url("/area"),
                log_out=log_out,
            )
        # A form post carries the fields, not the signals: the password never goes in a URL.
        return html(
            """
<main>
  <h1>Login</h1>
  <p>Any user name; the password is <code>{password}</code>.
     The <a id="to-area" href="{area}">area</a> is for logged-in users only.</p>
  <form id="login-form"
        data-on:submit__prevent="@post('{login_url}', {{contentType: 'form', requestCancellation: 'disabled'}})">
    <input type="hidden" name="via_ctx" value="{ctx}">
    <label>User name <input id="username" name="username" autocomplete="username" required></label>
    <label>Password <input id="password" name="password" type="password" autocomplete="current-password"></label>
    <button id="login">Log in</button>
  </form>
  <p id="error" data-text="{error}"></p>
</main>""",
            password=PASSWORD,
            area=app.url("/area"),
            login_url=login.url,
            ctx=c.id,
            error=error.ref(),
        )

    c.view(view)


def area_nav(c: Context, current: str) -> Markup:
    """The area's header: who is logged in, the area's pages, the logout button, and the banner
    shown when an action of this page is refused (the session was logged out elsewhere)."""
    user = c.state_from_middleware["user"]
    links = html(" ").join(
        html('<a href="{}"{}>{}</a>', app.url(path), raw(" aria-current=page") if path == current else "", label)
        for path, label in (("/area", "Dashboard"), ("/area/profile", "Profile"))
    )
    refused = "evt.detail.type === 'error' && evt.detail.argsRaw.status === '403' && ($_refused = true)"
    return html(
        """
<nav data-signals="{{_refused: false}}" data-on:datastar-fetch="{refused}">
  <span id="user">{user}</span> {links}
  <button id="logout" data-on:click="{logout}">Log out</button>
</nav>
<p id="refused" data-show="$_refused" style="display: none">This page's actions were refused: you have been
  logged out. <a href="{home}">Log in again</a>.</p>""",
        refused=refused,
        user=user,
        links=links,
        logout=c.actions["logout"],
        home=app.url("/"),
    )


with app.group("/area", middleware=[require_user]) as area:

    @area.page("/", title="The area")
    def dashboard(c: Context) -> None:
        notes: list[str] = c.session_data.setdefault("notes", [])
        draft = c.signal("", "draft", writable=True, max_length=MAX_NOTE)
        c.action(logout, "logout")

        @c.action
        def add_note() -> None:
            text = draft.as_str().strip()
            if text:  # the click cleared the input in the browser
                notes.append(text)
                c.sync()

        c.view(
            lambda: html(
                """
<main>
  {nav}
  <h1>Dashboard</h1>
  <p>Only logged-in users see this page. Your notes, kept in your session:</p>
  <ul id="notes">{notes}</ul>
  <form id="note-form" data-on:submit__prevent="{add_note}; {draft_ref} = ''">
    <input id="draft" {draft} maxlength="{max_note}" placeholder="A note" autocomplete="off">
    <button>Add</button>
  </form>
</main>""",
                nav=area_nav(c, "/area"),
                notes=(html("<li>{}</li>", n) for n in notes),
                add_note=add_note,
                draft=draft.bind(),
                draft_ref=draft.ref(),
                max_note=MAX_NOTE,
            )
        )

    @area.page("/profile", title="Profile")
    def profile(c: Context) -> None:
        c.action(logout, "logout")
        since = c.session_data.get("since", "?")
        c.view(
            lambda: html(
                """
<main>
  {nav}
  <h1>Profile</h1>
  <p id="profile">User <b>{user}</b>, logged in since {since}.</p>
</main>""",
                nav=area_nav(c, "/area/profile"),
                user=c.state_from_middleware["user"],
                since=since,
            )
        )


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
