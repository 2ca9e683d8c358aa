"""The operations layer: settings, autotune, metrics, health and logs (DESIGN.md "Operations").

``pyvia.ops.settings``      one strict configuration from pyvia.toml, ``PYVIA_*`` and keywords
``pyvia.ops.autotune``      limits from the cgroup, the derived profile and its one log line
``pyvia.ops.metric_types``  Prometheus counters, gauges, histograms, their registry and text format
``pyvia.ops.monitors``      the process's own figures: resident memory, GC pauses, loop lag
``pyvia.ops.metrics``       pyvia's metrics and their collection from the App
``pyvia.ops.health``        ``/_health``, ``/_ready``, ``/metrics`` responses
``pyvia.ops.logs``          text or JSON log lines with request ids and redaction

Nothing here is imported by the core; the core calls in (see ``docs/operations.md``).
"""
