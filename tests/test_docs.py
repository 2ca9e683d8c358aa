"""Every ```python block in the README and docs/ runs (```python skip marks an illustration)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def samples() -> list[tuple[str, str]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, match in enumerate(FENCE.finditer(path.read_text())):
            out.append((f"{path.relative_to(ROOT)}#{i + 1}", match.group(1)))
    return out


def test_the_docs_have_samples() -> None:
    assert len(samples()) >= 2


@pytest.mark.parametrize(("where", "code"), samples(), ids=[w for w, _ in samples()])
def test_sample_runs(where: str, code: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_sample_{abs(hash(where))}"}
    exec(compile(code, where, "exec"), namespace)
