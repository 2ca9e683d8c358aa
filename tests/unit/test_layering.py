"""The layers: the core (pyvia, pyvia.runtime, ...) does not import the front end (pyvia.server)
or the cluster (pyvia.cluster); they plug into it. Read from the source, every import counted
(inside functions and under TYPE_CHECKING too), so a new one fails here before it forms a circle.

The exceptions below are today's: the list only shrinks. An entry that is no longer needed
fails the test too, so whoever removes an import removes its entry.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pyvia

SRC = Path(pyvia.__file__).parent
LOWER = ("pyvia.server", "pyvia.cluster")

#: Modules above the core: the front end, the cluster, and the command line that starts them.
ABOVE = ("pyvia.server", "pyvia.cluster", "pyvia.cli")

#: Core modules that import a layer above, each with its reason: (importer, imported) -> why.
ALLOWED = {
    # Entry points that genuinely start a server.
    ("pyvia.app", "pyvia.server.options"): "App.run() starts the native server (its limits, checked)",
    ("pyvia.app", "pyvia.server.runner"): "App.run() starts the native server",
}


def _module_name(path: Path) -> str:
    parts = ["pyvia", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, absolute (``from pyvia import server`` is pyvia.server)."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if _is_module(f"{base}.{a.name}"))
    return found


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module of pyvia (``from pyvia import server``), not a name in one."""
    if not name.startswith("pyvia."):
        return False
    path = SRC.joinpath(*name.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _is_under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _crossings() -> set[tuple[str, str]]:
    crossings = set()
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        if _is_under(module, ABOVE):
            continue
        for name in _imports(path, module):
            if _is_under(name, LOWER):
                crossings.add((module, name))
    return crossings


def test_the_core_does_not_import_the_server_or_the_cluster() -> None:
    unexpected = sorted(_crossings() - ALLOWED.keys())
    assert not unexpected, (
        f"core modules import the server or the cluster: {unexpected}; the core offers an interface they "
        "implement instead (DESIGN.md, Architecture)"
    )


def test_the_exceptions_only_shrink() -> None:
    stale = sorted(ALLOWED.keys() - _crossings())
    assert not stale, f"no longer imported, so no longer allowed: remove {stale} from ALLOWED"


def test_the_runtime_imports_neither() -> None:
    runtime = {(m, n) for m, n in _crossings() if _is_under(m, ("pyvia.runtime",))}
    assert not runtime


def test_the_scan_sees_imports_inside_functions() -> None:
    # App.run's import is inside the method: a scan of module-level imports alone would miss it.
    assert ("pyvia.app", "pyvia.server.runner") in _crossings()


def _defined_names(tree: ast.AST) -> set[str]:
    """The private names a module defines: its functions and classes, what it assigns to
    ``self``/``cls``, class-level names, slot strings, module-level names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
            names.add(node.value)  # a slot, or a marker read with getattr
    return names


#: Names of the standard library spelled with an underscore that are its public API.
STDLIB_UNDERSCORED = {("os", "_exit")}


def _foreign_private_reads(source: str) -> list[tuple[int, str]]:
    """``obj._name`` (``obj`` not ``self``/``cls``) where this module defines no ``_name``."""
    tree = ast.parse(source)
    defined = _defined_names(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            and node.attr not in defined
            and not (isinstance(node.value, ast.Name) and (node.value.id, node.attr) in STDLIB_UNDERSCORED)
        ):
            found.append((node.lineno, node.attr))
    return found


def test_no_module_reaches_into_another_modules_private_names() -> None:
    # What one module needs of another's objects is public there (issue 20: SLF001 across modules).
    # Within a module, a class may read a private name of another class of the same module.
    crossings = {
        f"{path.relative_to(SRC)}:{line} {name}"
        for path in sorted(SRC.rglob("*.py"))
        for line, name in _foreign_private_reads(path.read_text(encoding="utf-8"))
    }
    assert not crossings, sorted(crossings)


def test_the_private_name_scan_sees_a_read_of_another_modules_name() -> None:
    source = "class A:\n    def f(self, other):\n        self._mine = other._theirs\n        return other._mine\n"
    assert _foreign_private_reads(source) == [(3, "_theirs")]
