"""Prometheus metric primitives: counters, gauges, histograms, their registry and the text format 0.0.4.

Separate from :mod:`pyvia.ops.metrics` (which declares the metrics pyvia exposes) so that the
kinds and their exposition stand alone: no dependency, no knowledge of the App. A label is
declared with its closed set of values and anything else is counted under ``other``, so no
metric here can grow without bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["CONTENT_TYPE", "OTHER", "Counter", "Gauge", "Histogram", "Metric", "Registry"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "other"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def _format_value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


class Metric:
    """Common to the three kinds: a name, help, declared labels and one child per label tuple."""

    kind = ""

    def __init__(self, name: str, documentation: str, labels: Mapping[str, Sequence[str]] | None = None) -> None:
        if not _NAME.match(name):
            raise ValueError(f"metric name {name!r} must match [a-zA-Z_:][a-zA-Z0-9_:]*")
        self.name = name
        self.documentation = documentation
        self.label_names: tuple[str, ...] = tuple(labels or {})
        self._allowed: tuple[frozenset[str], ...] = tuple(frozenset(v) for v in (labels or {}).values())
        for label in self.label_names:
            if not _LABEL.match(label) or label.startswith("__") or label == "le":
                raise ValueError(f"label name {label!r} of {name} is not allowed")
        self._children: dict[tuple[str, ...], Any] = {}
        if not self.label_names:
            self._children[()] = self._new_child()

    def _new_child(self) -> Any:
        raise NotImplementedError

    def _key(self, labels: Mapping[str, object]) -> tuple[str, ...]:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {list(self.label_names)}, got {sorted(labels)}")
        key = []
        for name, allowed in zip(self.label_names, self._allowed, strict=True):
            value = str(labels[name])
            key.append(value if value in allowed else OTHER)
        return tuple(key)

    def labels(self, **labels: object) -> Any:
        """The child for these label values (a value outside the declared set becomes ``other``)."""
        key = self._key(labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._new_child()
        return child

    def unlabelled(self) -> Any:
        """The one child of a metric without labels: a hot path binds its method once."""
        try:
            return self._children[()]
        except KeyError:
            raise ValueError(f"{self.name} has labels {list(self.label_names)}: use .labels(...)") from None

    def _label_text(self, key: tuple[str, ...], extra: str = "") -> str:
        pairs = [f'{n}="{_escape_label(v)}"' for n, v in zip(self.label_names, key, strict=True)]
        if extra:
            pairs.append(extra)
        return "{" + ",".join(pairs) + "}" if pairs else ""

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {_escape_help(self.documentation)}", f"# TYPE {self.name} {self.kind}"]
        for key in sorted(self._children):
            lines.extend(self._samples(key, self._children[key]))
        return lines

    def _samples(self, key: tuple[str, ...], child: Any) -> list[str]:
        return [f"{self.name}{self._label_text(key)} {_format_value(child.value)}"]


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class _CounterChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"a counter only goes up; got {amount}")
        self.value += amount

    def set_total(self, total: float) -> None:
        """Set from a running total kept elsewhere (for collectors); never below the last value."""
        if total > self.value:
            self.value = total


class _GaugeChild(_Value):
    __slots__ = ()

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class Counter(Metric):
    """A total that only goes up: ``c.inc()``, or ``c.labels(kind="page").inc()``."""

    kind = "counter"

    def __init__(self, name: str, documentation: str, labels: Mapping[str, Sequence[str]] | None = None) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter name {name!r} must end with _total")
        super().__init__(name, documentation, labels)

    def _new_child(self) -> _CounterChild:
        return _CounterChild()

    def inc(self, amount: float = 1.0) -> None:
        self.unlabelled().inc(amount)

    def set_total(self, total: float) -> None:
        self.unlabelled().set_total(total)

    @property
    def value(self) -> float:
        return float(self.unlabelled().value)


class Gauge(Metric):
    """A value that goes up and down: ``g.set(n)``."""

    kind = "gauge"

    def _new_child(self) -> _GaugeChild:
        return _GaugeChild()

    def set(self, value: float) -> None:
        self.unlabelled().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self.unlabelled().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.unlabelled().dec(amount)

    @property
    def value(self) -> float:
        return float(self.unlabelled().value)


class _HistogramChild:
    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        i = 0
        for bound in self.bounds:  # ~12 bounds: a scan beats bisect's call overhead
            if value <= bound:
                break
            i += 1
        self.counts[i] += 1
        self.sum += value
        self.count += 1


class Histogram(Metric):
    """Observations counted into fixed buckets: ``h.observe(seconds)``."""

    kind = "histogram"

    def __init__(
        self, name: str, documentation: str, buckets: Iterable[float], labels: Mapping[str, Sequence[str]] | None = None
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds or list(bounds) != sorted(set(bounds)) or math.isinf(bounds[-1]):
            raise ValueError(f"buckets of {name} must be finite, increasing and not empty; got {bounds}")
        self.buckets = bounds
        super().__init__(name, documentation, labels)

    def _new_child(self) -> _HistogramChild:
        return _HistogramChild(self.buckets)

    def observe(self, value: float) -> None:
        self.unlabelled().observe(value)

    @property
    def count(self) -> int:
        return int(self.unlabelled().count)

    def _samples(self, key: tuple[str, ...], child: Any) -> list[str]:
        lines = []
        running = 0
        for bound, n in zip((*self.buckets, math.inf), child.counts, strict=True):
            running += n
            le = f'le="{_format_value(bound)}"'
            lines.append(f"{self.name}_bucket{self._label_text(key, le)} {running}")
        lines.append(f"{self.name}_sum{self._label_text(key)} {_format_value(child.sum)}")
        lines.append(f"{self.name}_count{self._label_text(key)} {child.count}")
        return lines


class Registry:
    """A named set of metrics rendered together in the Prometheus text format."""

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}

    def _add(self, metric: Any) -> Any:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name!r} is already registered")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, documentation: str, *, labels: Mapping[str, Sequence[str]] | None = None) -> Counter:
        return self._add(Counter(name, documentation, labels))  # type: ignore[no-any-return]  # _add returns its arg

    def gauge(self, name: str, documentation: str, *, labels: Mapping[str, Sequence[str]] | None = None) -> Gauge:
        return self._add(Gauge(name, documentation, labels))  # type: ignore[no-any-return]  # _add returns its arg

    def histogram(
        self,
        name: str,
        documentation: str,
        *,
        buckets: Iterable[float],
        labels: Mapping[str, Sequence[str]] | None = None,
    ) -> Histogram:
        return self._add(Histogram(name, documentation, buckets, labels))  # type: ignore[no-any-return]

    def get(self, name: str) -> Metric:
        return self._metrics[name]

    def render(self) -> bytes:
        """Every metric in the text exposition format 0.0.4 (serve it as :data:`CONTENT_TYPE`)."""
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.extend(metric.render())
        return ("\n".join(lines) + "\n").encode()
