"""A strict reader of the Prometheus text format 0.0.4, to check what /metrics renders."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)\Z")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|\Z)')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], value)


def parse(text: str) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """(name -> (type, help), (sample name, labels) -> value); raises AssertionError on bad lines."""
    assert text.endswith("\n"), "the exposition ends with a newline"
    meta: dict[str, list[str]] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            meta.setdefault(name, ["", ""])[1] = doc
            continue
        if line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            meta.setdefault(name, ["", ""])[0] = kind
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels: list[tuple[str, str]] = []
        body = m.group(2) or ""
        pos = 0
        while pos < len(body):
            lm = _LABEL.match(body, pos)
            assert lm, f"bad labels in {line!r}"
            labels.append((lm.group(1), _unescape(lm.group(2))))
            pos = lm.end()
        key = (m.group(1), frozenset(labels))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(m.group(3))
    for name, (kind, _doc) in meta.items():
        assert kind, f"{name} has HELP but no TYPE"
    return {k: (v[0], v[1]) for k, v in meta.items()}, samples


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]
