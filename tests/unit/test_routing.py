"""Route patterns, compiled at registration, and the router that matches paths to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pyvia.errors import RouteError
from pyvia.routing import Route, Router, compile_route


def page_handler(c: Any) -> None:
    return None


def other_handler(c: Any) -> None:
    return None


async def async_handler(request: Any) -> str:
    return "ok"


def page(pattern: str, handler: Callable[..., Any] = page_handler) -> Route:
    return compile_route(pattern, handler, "page", ["GET"])


def route(pattern: str, methods: list[str], handler: Callable[..., Any] = page_handler) -> Route:
    return compile_route(pattern, handler, "route", methods)


def router(*routes: Route) -> Router:
    r = Router()
    for item in routes:
        r.add(item)
    return r


# --- compile_route -------------------------------------------------------------------------------


def test_literal_pattern_has_no_regex_or_params() -> None:
    r = page("/about")
    assert r.regex is None
    assert r.param_names == ()


def test_placeholders_become_named_params_in_order() -> None:
    r = page("/orgs/{org}/repos/{repo_name}")
    assert r.param_names == ("org", "repo_name")
    assert r.regex is not None


def test_methods_are_upper_cased() -> None:
    assert route("/api", ["get", "Post"]).methods == frozenset({"GET", "POST"})


def test_async_handler_is_detected_at_registration() -> None:
    assert route("/a", ["GET"], async_handler).is_async
    assert not route("/b", ["GET"], page_handler).is_async


def test_pattern_must_start_with_slash() -> None:
    with pytest.raises(RouteError, match=r"'about' must start with '/'"):
        page("about")


@pytest.mark.parametrize(
    "pattern", ["/_sse", "/_sse/x", "/_action", "/_action/inc", "/_session", "/_session/close", "/datastar.js"]
)
def test_reserved_paths_are_refused(pattern: str) -> None:
    with pytest.raises(RouteError, match="reserves"):
        page(pattern)


@pytest.mark.parametrize("pattern", ["/_actions", "/sse", "/session", "/static/datastar.js", "/_actionable"])
def test_paths_that_only_resemble_reserved_ones_are_allowed(pattern: str) -> None:
    assert page(pattern).pattern == pattern


def test_repeated_param_name_is_refused() -> None:
    with pytest.raises(RouteError, match="repeats a parameter name"):
        page("/{id}/x/{id}")


@pytest.mark.parametrize(
    "pattern", ["/users/{", "/users/}", "/users/{}", "/users/{1id}", "/users/{bad-name}", "/users/{ id }"]
)
def test_malformed_placeholder_is_refused(pattern: str) -> None:
    with pytest.raises(RouteError, match="malformed placeholder"):
        page(pattern)


@pytest.mark.parametrize("pattern", ["/users/{id}/{bad-name}", "/users/{id}/{", "/users/{id}}", "/users/{{id}}"])
def test_malformed_placeholder_next_to_a_valid_one_is_refused(pattern: str) -> None:
    with pytest.raises(RouteError, match="malformed placeholder"):
        page(pattern)


def test_route_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        page("no-slash")


# --- Router.match ----------------------------------------------------------------------------------


def test_literal_route_matches_exactly() -> None:
    r = router(page("/about"))
    routes, params = r.match("/about")
    assert [x.pattern for x in routes] == ["/about"]
    assert params == {}
    assert r.match("/about/") == ([], {})
    assert r.match("/abou") == ([], {})


def test_param_route_captures_one_segment() -> None:
    r = router(page("/users/{id}/posts/{post}"))
    routes, params = r.match("/users/42/posts/hello-world")
    assert [x.pattern for x in routes] == ["/users/{id}/posts/{post}"]
    assert params == {"id": "42", "post": "hello-world"}


@pytest.mark.parametrize("path", ["/users/", "/users", "/users/1/2", "/users/1/", "/xusers/1", "/users/1x/../2"])
def test_param_route_does_not_match_empty_or_extra_segments(path: str) -> None:
    assert router(page("/users/{id}")).match(path) == ([], {})


def test_literal_text_around_a_param_is_matched_literally() -> None:
    r = router(page("/files/{name}.txt"))
    assert r.match("/files/a.txt")[1] == {"name": "a"}
    assert r.match("/files/aXtxt") == ([], {})  # the dot is not a regex wildcard


def test_first_registered_pattern_wins() -> None:
    r = router(page("/items/{id}", page_handler), page("/items/{slug}", other_handler))
    routes, params = r.match("/items/7")
    assert [x.handler for x in routes] == [page_handler]
    assert params == {"id": "7"}


def test_literal_route_beats_a_pattern_registered_before_it() -> None:
    r = router(page("/users/{id}", page_handler), page("/users/me", other_handler))
    routes, params = r.match("/users/me")
    assert [x.handler for x in routes] == [other_handler]
    assert params == {}
    assert r.match("/users/1")[1] == {"id": "1"}


def test_unknown_path_matches_nothing() -> None:
    assert router(page("/a"), page("/b/{x}")).match("/c") == ([], {})


def test_page_lookup_by_exact_pattern() -> None:
    p = page("/rooms/{room}")
    r = router(p, route("/api/{x}", ["GET"]))
    assert r.page("/rooms/{room}") is p
    assert r.page("/rooms/lobby") is None
    assert r.page("/api/{x}") is None  # a plain route is not a page


# --- duplicates ----------------------------------------------------------------------------------


def test_duplicate_page_route_is_refused() -> None:
    r = router(page("/about"))
    with pytest.raises(RouteError, match=r"'/about' is already registered"):
        r.add(page("/about", other_handler))


def test_duplicate_patterned_page_route_is_refused() -> None:
    r = router(page("/u/{id}"))
    with pytest.raises(RouteError, match="already registered"):
        r.add(page("/u/{id}", other_handler))


def test_plain_route_on_a_page_path_is_refused() -> None:
    r = router(page("/about"))
    with pytest.raises(RouteError, match="already registered"):
        r.add(route("/about", ["POST"]))


def test_page_on_a_plain_route_path_is_refused() -> None:
    r = router(route("/about", ["POST"]))
    with pytest.raises(RouteError, match="already registered"):
        r.add(page("/about"))


def test_plain_routes_with_different_methods_share_a_path() -> None:
    get, post = route("/api", ["GET"]), route("/api", ["POST", "PUT"])
    r = router(get, post)
    assert r.match("/api") == ([get, post], {})


def test_patterned_plain_routes_with_different_methods_share_a_path() -> None:
    get, delete = route("/api/{id}", ["GET"]), route("/api/{id}", ["DELETE"])
    r = router(get, route("/api/{other}", ["POST"]), delete)
    routes, params = r.match("/api/3")
    assert routes == [get, delete]
    assert params == {"id": "3"}


def test_plain_routes_with_an_overlapping_method_are_refused() -> None:
    r = router(route("/api", ["GET", "POST"]))
    with pytest.raises(RouteError, match="already registered"):
        r.add(route("/api", ["POST"]))


def test_overlapping_method_with_a_later_route_on_the_path_is_refused() -> None:
    # GET then POST on /api; a second POST overlaps the second route, not the first.
    r = router(route("/api", ["GET"]), route("/api", ["POST"]))
    with pytest.raises(RouteError, match="already registered"):
        r.add(route("/api", ["POST"]))
