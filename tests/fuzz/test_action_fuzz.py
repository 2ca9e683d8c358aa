"""The whole action path, fuzzed in process: whatever a client posts (any Origin, cookie, content
type and body, forms and signals JSON), the answer is a 2xx or a 4xx with no exception in the app,
and nothing hangs. The test client re-raises any server exception, so a 500 fails the example."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyvia import App, Context
from pyvia.testing import TestClient
from tests.fuzz.bounds import bounded
from tests.fuzz.test_forms_fuzz import BOUNDARY, multipart_bodies

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_app() -> App:
    app = App(action_rate=0, max_form_fields=20, max_form_files=5)

    @app.page("/")
    def page(c: Context) -> None:
        count = c.signal(0, "count")

        @c.action
        def inc() -> None:
            count.value += 1
            for f in c.files_of("f"):
                assert f.data is not None

        c.view(lambda: f"<p>{count.value}</p>")

    return app


APP = make_app()

origins = st.sampled_from(
    [
        "http://testserver",
        "https://testserver",
        "null",
        "",
        "foo://testserver",
        "http://evil.example",
        "http://testserver/",
        "HTTP://TESTSERVER",
    ]
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/x-www-form-urlencoded",
        "text/plain",
        "",
        f"multipart/form-data; boundary={BOUNDARY}",
        "multipart/form-data",
        "application/octet-stream",
    ]
)


@st.composite
def bodies(draw: st.DrawFn, ctx: str) -> bytes:
    ctx_value = draw(st.sampled_from([ctx, ctx + "=", ctx[:-1], "", "x.y", ctx.replace(".", "..")]))
    return draw(
        st.one_of(
            st.just(json.dumps({"via_ctx": ctx_value}).encode()),
            st.dictionaries(
                st.sampled_from(["via_ctx", "count", "other"]),
                st.one_of(
                    st.just(ctx_value),
                    st.integers(),
                    st.floats(),
                    st.text(max_size=10),
                    st.just(10**400),
                    st.just("9" * 5000),
                ),
                max_size=3,
            ).map(lambda d: json.dumps(d, allow_nan=True).encode()),
            st.just(f"via_ctx={ctx_value}&count=1e308&x=%ff".encode()),
            multipart_bodies.map(
                lambda b: (
                    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="via_ctx"\r\n\r\n{ctx_value}\r\n'.encode()
                    + b
                )
            ),
            st.binary(max_size=100),
        )
    )


@FUZZ
@given(
    data=st.data(),
    origin=origins,
    second_origin=st.none() | origins,
    content_type=content_types,
    action=st.sampled_from(["inc", "inc", "nope", "", "../inc"]),
    planted=st.booleans(),
)
def test_any_action_post_is_answered_with_a_2xx_or_a_4xx(
    data: st.DataObject, origin: str, second_origin: str | None, content_type: str, action: str, planted: bool
) -> None:
    with TestClient(APP) as client:
        tab = client.open("/")
        if planted:
            client.cookies["via_session_id"] = "ab" * 32
        client.origin = origin
        headers = {"content-type": content_type} if content_type else {}
        if second_origin is not None:
            headers["origin"] = second_origin
        body = data.draw(bodies(tab.context.id))
        with bounded(10):
            response = client.post(f"/_action/{action}", body=body, headers=headers)
        assert 200 <= response.status < 500, (response.status, response.body)
        if response.status != 200:
            assert response.status in (400, 403, 404, 405, 413), response.status
