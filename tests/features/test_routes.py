"""Routing, plain routes, groups, middleware, error pages, cookies, uploads and downloads."""

from __future__ import annotations

import asyncio
import html
import time

import pytest

from pyvia import App, Context, DeclarationError, Request, Response, RouteError
from pyvia import html as html_markup
from pyvia.downloads import disposition
from pyvia.testing import TestClient


def make_app() -> App:
    app = App()
    calls: list[str] = []
    app.extra_calls = calls  # type: ignore[attr-defined]

    @app.middleware
    def record(request: Request, call_next):
        calls.append(f"global {request.kind}")
        return call_next(request)

    async def auth(request: Request, call_next):
        await asyncio.sleep(0)
        if request.cookies.get("user") != "ann":
            return Response.text("login", 302, [("location", "/login")])
        request.state["user"] = "ann"
        return await call_next(request)

    @app.page("/users/{user_id}")
    def user(c: Context, user_id: int) -> None:
        c.view(lambda: f'<p id="u">user {user_id + 1}</p>')

    with app.group("/admin", middleware=[auth]) as admin:

        @admin.page("/")
        def dashboard(c: Context) -> None:
            hits = c.signal(0, "hits")

            @c.action
            def hit() -> None:
                hits.value += 1
                c.set_cookie("seen", "yes")

            c.view(lambda: f"<p id='who'>hello {c.state_from_middleware['user']}</p>")

        @admin.route("GET", "/api/stats")
        def stats(request: Request) -> dict:
            return {"user": request.state["user"]}

    @app.route(["GET", "POST"], "/echo/{word}")
    def echo(request: Request, word: str) -> Response:
        return Response.text(f"{request.method} {word}")

    @app.route("GET", "/async")
    async def async_route() -> str:
        await asyncio.sleep(0)
        return "<p>async</p>"

    @app.page("/files")
    def files(c: Context) -> None:
        name = c.signal("", "name")

        @c.action
        def upload() -> None:
            f = c.files["doc"]
            name.value = f"{f.filename}:{f.size}:{c.input('note')}"

        @c.action
        def export() -> None:
            name.value = c.download([b"a,b\n", b"1,2\n"], "data.csv")

        c.view(lambda: "<form id='f'></form>")

    @app.page("/broken")
    def broken(c: Context) -> None:
        raise ValueError("database password is hunter2")

    @app.not_found
    def missing(request: Request) -> str:
        return f"<h1>No page at {request.path}</h1>"

    @app.error_page
    def failed(request: Request, exc: BaseException) -> str:
        return "<h1>Sorry</h1>"

    return app


def test_path_params_are_cast_by_annotation() -> None:
    with TestClient(make_app()) as client:
        assert "user 42" in client.get("/users/41").body.decode()
        assert client.get("/users/abc").status == 404


def test_plain_routes_methods_and_async() -> None:
    with TestClient(make_app()) as client:
        assert client.get("/echo/hi").body == b"GET hi"
        assert client.post("/echo/yo").body == b"POST yo"
        response = client.request("PUT", "/echo/x")
        assert response.status == 405
        assert ("allow", "GET, HEAD, POST") in response.headers
        assert client.get("/async").body == b"<p>async</p>"


def test_group_middleware_guards_pages_routes_and_actions() -> None:
    app = make_app()
    with TestClient(app) as client:
        response = client.get("/admin")
        assert response.status == 302 and ("location", "/login") in response.headers
        assert client.get("/admin/api/stats").status == 302
        client.cookies["user"] = "ann"
        tab = client.open("/admin")
        assert "hello ann" in tab.html
        assert client.get("/admin/api/stats").body == b'{"user":"ann"}'
        assert tab.action("hit").status == 200
        assert client.cookies["seen"] == "yes"
        del client.cookies["user"]
        assert tab.action("hit").status == 302  # middleware runs around actions too
        assert tab.signals["_hits"] == 1
        assert "global action" in app.extra_calls and "global stream" in app.extra_calls


def test_custom_404_and_error_page_leak_nothing() -> None:
    with TestClient(make_app(), raise_server_exceptions=False) as client:
        missing = client.get("/nope")
        assert missing.status == 404 and b"No page at /nope" in missing.body
        broken = client.get("/broken")
        assert broken.status == 500 and b"Sorry" in broken.body and b"hunter2" not in broken.body


def test_head_on_a_page_answers_without_making_a_context() -> None:
    app = make_app()
    with TestClient(app) as client:
        response = client.request("HEAD", "/users/1")
        assert response.status == 200 and app.contexts == {}


def test_multipart_upload_and_one_shot_download() -> None:
    with TestClient(make_app()) as client:
        tab = client.open("/files")
        boundary = "XyZ"
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="via_ctx"\r\n\r\n{tab.id}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\nhello\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="doc"; filename="a.txt"\r\n'
            f"Content-Type: text/plain\r\n\r\n12345\r\n--{boundary}--\r\n"
        ).encode()
        response = client.post(
            "/_action/upload", body=body, headers={"content-type": f"multipart/form-data; boundary={boundary}"}
        )
        assert response.status == 200
        assert tab.signals["_name"] == "a.txt:5:hello"
        tab.action("export")
        url = tab.signals["_name"]
        assert url.startswith("/_download/")
        other = TestClient(tab.client.app)
        other.get("/files")
        assert other.get(url).status == 404  # bound to the session
        download = client.get(url)
        assert download.status == 200 and download.body == b"a,b\n1,2\n"
        assert ("content-disposition", "attachment; filename*=UTF-8''data.csv") in download.headers
        assert client.get(url).status == 404  # one shot
        other.close()


def test_a_download_is_named_by_a_file_name_encoded_as_rfc_8187_asks() -> None:
    # a newcomer's c.download(data, "../../etc/passwd") sent the slashes as they were
    assert disposition("../../etc/passwd") == "attachment; filename*=UTF-8''passwd"
    assert disposition("C:\\Users\\me\\notes.txt") == "attachment; filename*=UTF-8''notes.txt"
    assert disposition("..") == disposition("dir/") == "attachment; filename*=UTF-8''download"
    assert disposition('café 1;x"y.csv') == "attachment; filename*=UTF-8''caf%C3%A9%201%3Bx%22y.csv"
    assert disposition("a!#$&+^`|~-_.b") == "attachment; filename*=UTF-8''a!#$&+^`|~-_.b"


def test_duplicate_and_reserved_routes_are_refused() -> None:
    app = make_app()
    with pytest.raises(RouteError, match="already registered"):
        app.page("/users/{user_id}")(lambda c: None)
    with pytest.raises(RouteError, match="reserves"):
        app.page("/_sse")(lambda c: None)


def test_several_files_under_one_field_and_the_per_tab_connect_hook() -> None:
    app = App()
    connects: list[str] = []

    @app.page("/")
    def page(c: Context) -> None:
        names = c.signal("", "names")
        c.on_connect(lambda: connects.append("connect"))

        @c.action
        def upload() -> None:
            names.value = ",".join(f"{f.filename}:{f.size}" for f in c.files_of("docs"))

        c.view(lambda: "<form></form>")

    with TestClient(app) as client:
        tab = client.open("/")
        tab.disconnect()
        tab.reconnect()
        assert connects == ["connect", "connect"]
        b = "B0"
        parts = [f'--{b}\r\nContent-Disposition: form-data; name="via_ctx"\r\n\r\n{tab.id}\r\n']
        for name, data in (("a.txt", "1"), ("b.txt", "22")):
            parts.append(
                f'--{b}\r\nContent-Disposition: form-data; name="docs"; filename="{name}"\r\n'
                f"Content-Type: text/plain\r\n\r\n{data}\r\n"
            )
        body = ("".join(parts) + f"--{b}--\r\n").encode()
        response = client.post(
            "/_action/upload", body=body, headers={"content-type": f"multipart/form-data; boundary={b}"}
        )
        assert response.status == 200
        assert tab.signals["_names"] == "a.txt:1,b.txt:2"


def test_request_state_holds_only_what_middleware_put_there() -> None:
    # The core keeps what it works out about a request (its parsed signals and form, a new
    # session, the checks passed) on the request itself: a tab copies request.state as the
    # middleware's data, and a user who lists it sees their own keys only.
    app = App()
    seen: list[dict[str, object]] = []

    @app.middleware
    def tag(request: Request, call_next):
        request.state["user"] = "ann"
        response = call_next(request)
        seen.append(dict(request.state))
        return response

    @app.page("/")
    def page(c: Context) -> None:
        note = c.signal("", "note", writable=True)

        @c.action
        def save() -> None:
            note.value = note.value.upper()

        c.view(lambda: f"<p id='s'>{sorted(c.state_from_middleware)}</p>")

    with TestClient(app) as client:
        tab = client.open("/")  # the page view that starts the session
        assert "['user']" in tab.page
        tab.action("save", note="hi")
        assert tab.signals["note"] == "HI"
    assert seen and all(state == {"user": "ann"} for state in seen), seen


def test_state_from_middleware_is_the_page_views_even_when_middleware_put_nothing_there() -> None:
    # A request's state is made only when asked for (a tab keeps its page's request); the tab's
    # state_from_middleware is still the page request's own dict during the view, and an action's
    # state never becomes the page's.
    app = App()

    @app.middleware
    def tag_actions(request: Request, call_next):
        if request.kind == "action":
            request.state["user"] = "from the action"
        return call_next(request)

    @app.page("/")
    def page(c: Context) -> None:
        c.state_from_middleware["seen"] = "by the page"
        shown = c.signal("", "shown")

        @c.action
        def look() -> None:
            shown.value = f"{sorted(c.state_from_middleware)} {sorted(c.request.state)}"

        c.view(lambda: f"<p id='s'>{c.request.state.get('seen')} {shown.value}</p>")

    with TestClient(app) as client:
        tab = client.open("/")
        assert "by the page" in tab.page  # the handler's write is the request's state
        tab.action("look")
        assert tab.signals["_shown"] == "['seen'] ['user']"
        blank = client.open("/")
        assert blank.page.count("by the page") == 1


def test_a_big_form_is_parsed_on_the_apps_own_threads_which_end_when_it_stops() -> None:
    # A form over 64 KB is parsed off the loop, on threads the app makes when it first needs
    # them and ends at its stop: no process-wide pool outlives the app (or is shared by two).
    import threading

    app = App()

    @app.page("/")
    def page(c: Context) -> None:
        note = c.signal("", "note", writable=True, max_length=200_000)

        @c.action
        def save() -> None:
            note.value = f"{len(note.value)} characters"

        c.view(lambda: f"<p id='n'>{note.value}</p>")

    def form_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("pyvia-forms") and t.is_alive()]

    with TestClient(app) as client:
        tab = client.open("/")
        body = f"via_ctx={tab.id}&note=".encode() + b"x" * 100_000
        response = client.post(
            "/_action/save",
            body=body,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert response.status == 200, response.body
        assert app.runtime.actions.parsing is not None and form_threads()
        assert tab.signals["note"] == "100000 characters"
    assert app.runtime.actions.parsing is None
    deadline = time.monotonic() + 5
    while form_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not form_threads()


def test_the_test_client_fails_a_response_no_server_could_write() -> None:
    """A header a server cannot write (outside latin-1, or with a line break) is a 500 in a browser:
    the test client must not answer it as if it were fine."""
    app = App()

    @app.route("GET", "/bad")
    def bad(request: Request) -> Response:
        return Response.text("x", headers=[("x-name", "李")])

    @app.route("GET", "/split")
    def split(request: Request) -> Response:
        return Response.text("x", headers=[("x-name", "a\r\nset-cookie: evil=1")])

    @app.page("/")
    def page(c: Context) -> None:
        c.set_cookie("name", '李 \u2028 "q"; ;')  # any text is a cookie value
        c.view(lambda: "<p id='x'>x</p>")

    with TestClient(app) as client:
        for path in ("/bad", "/split"):
            with pytest.raises(AssertionError, match="no server can write"):
                client.get(path)
        assert client.get("/").status == 200
        assert client.get("/").status == 200 and "name" in client.cookies


def test_a_page_of_an_item_that_is_not_there_is_the_apps_404_page() -> None:
    from pyvia import NotFound, UserError

    app = App()
    tasks = {1: "write docs"}

    @app.page("/task/{task_id}")
    def task(c: Context, task_id: int) -> None:
        if task_id not in tasks:
            raise NotFound()
        c.view(lambda: f"<h1 id='t'>{tasks[task_id]}</h1>")

    @app.page("/note/{note_id}")
    def note(c: Context, note_id: int) -> None:
        raise UserError(f"No note #{note_id}", status=404)

    @app.not_found
    def missing(request: Request) -> str:
        return f"<h1 id='missing'>Nothing at {request.path}</h1>"

    with TestClient(app) as client:
        assert "write docs" in client.open("/task/1").html
        for path in ("/task/7", "/note/3", "/task/abc"):
            response = client.get(path)
            assert response.status == 404, path
            assert f"Nothing at {path}" in response.body.decode()
            assert dict(response.headers)["content-type"].startswith("text/html")
        assert len(app.contexts) == 1  # the views of no item left no tab behind


def test_an_async_middleware_that_forgets_await_is_named_in_the_error() -> None:
    app = App()

    @app.middleware
    async def guard(request: Request, call_next):  # type: ignore[no-untyped-def]
        return call_next(request)  # the await is missing

    @app.page("/")
    def page(c: Context) -> None:
        c.view(lambda: "<p>hi</p>")

    with TestClient(app) as client, pytest.raises(TypeError, match=r"return await call_next\(request\)"):
        client.get("/")  # over the network: a 500, and this line in the log


def room_app() -> App:
    app = App()

    @app.page("/r/{name}")
    def room(c: Context, name: str) -> None:
        said = c.signal(0, "said")

        @c.action
        def say() -> None:
            said.value += 1

        c.view(lambda: f"<main id='room'><h1 id='name'>{html_escape(name)}</h1><p id='said'>{said.value}</p></main>")

    return app


def html_escape(text: str) -> str:
    return html.escape(text)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/r/caf%C3%A9", "café"),
        ("/r/a%252Fb", "a%2Fb"),  # an encoded "%2F" is text, not a slash
        ("/r/%3Cscript%3E", "<script>"),
    ],
)
def test_a_path_parameter_is_given_decoded(path: str, name: str) -> None:
    with TestClient(room_app()) as client:
        tab = client.open(path)
        assert f"<h1 id='name'>{html_escape(name)}</h1>" in tab.html
        tab.action("say")
        assert tab.signals["_said"] == 1


@pytest.mark.parametrize("path", ["/r/a%2Fb", "/r/..%2F..%2Fetc%2Fpasswd", "/r/%2Fetc%2Fpasswd"])
def test_a_path_parameter_never_holds_a_slash(path: str) -> None:
    """A parameter is one segment, whatever the encoding: a handler that joins it to a folder
    (``base / name``) can never be given ``../../etc`` or ``/etc/passwd`` (an absolute part
    replaces the base). Names with a slash go in the query string."""
    with TestClient(room_app()) as client:
        assert client.get(path).status == 404


def test_an_unencoded_slash_is_still_two_segments() -> None:
    with TestClient(room_app()) as client:
        assert client.get("/r/a/b").status == 404


def test_arguments_computed_in_the_browser_are_typed_and_checked_like_bound_ones() -> None:
    """``action.js(key="evt.key")``: the browser makes the URL; the server converts and checks."""
    app = App()
    got: list[tuple[str, int]] = []

    @app.page("/")
    def page(c: Context) -> None:
        @c.action
        def move(key: str, steps: int) -> None:
            got.append((key, steps))

        js = move.js(key="evt.key", steps="evt.repeat ? 2 : 1")
        assert "encodeURIComponent(JSON.stringify(evt.key))" in str(js)
        assert "&#39;" in js.__html__() and "'" not in js.__html__()  # safe in an attribute
        with pytest.raises(DeclarationError, match="no argument 'speed'"):
            move.js(speed="1")
        c.view(lambda: html_markup('<main id="m" data-on:keydown__window="{act}"></main>', act=js))

    with TestClient(app) as client:
        tab = client.open("/")
        assert tab.post("/_action/move?key=%22ArrowUp%22&steps=2").status == 200
        assert tab.post("/_action/move?key=%22x%22&steps=%22two%22").status == 400  # not an int
        assert got == [("ArrowUp", 2)]
