"""The public surface and the layering rules of the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pyvia

SRC = Path(pyvia.__file__).parent
FRONT_ENDS = ("pyvia.server", "pyvia.asgi", "pyvia.cli")


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(pyvia) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(pyvia, name)).__name__ == "module"}
    assert set(pyvia.__all__) - {"__version__"} == public - modules


def test_core_never_imports_a_front_end_at_module_level() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        module = "pyvia." + ".".join(path.relative_to(SRC).with_suffix("").parts)
        if module.startswith(FRONT_ENDS) or module.endswith("__main__"):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:  # module level only; App.run imports the server lazily on purpose
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{module} imports {n}" for n in names if n.startswith(FRONT_ENDS)]
    assert offenders == []


def test_per_tab_objects_have_slots() -> None:
    from pyvia.components import Component
    from pyvia.context import Action, Context
    from pyvia.scopes import ScopeState, SharedSignal
    from pyvia.signals import Signal
    from pyvia.stream import Stream

    for cls in (Context, Action, Signal, SharedSignal, Stream, Component, ScopeState):
        assert not hasattr(cls.__new__(cls), "__dict__"), f"{cls.__name__} instances carry a __dict__"
