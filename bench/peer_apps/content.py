"""What every app of ``python -m bench peers`` shows: the same words in every framework.

Plain Python with no dependency, imported by each app: as ``bench.peer_apps.content`` by
pyvia's (served from this checkout) and as ``content`` by the peers' (run as scripts from
this folder, in their own virtualenvs).

* the counter's words (a page of about 1 KB with a count and a + button);
* :func:`board_view`, the 300-byte fragment a broadcast sends to every tab, the same markup
  as ``bench.apps_broadcast`` (``data-n`` carries the value, so a client can check the
  fragment against the signal that follows it);
* :data:`DOC`, a documentation page of about 20 KB (navigation, sections of paragraphs, code
  blocks, tables and lists), made of fixed pseudo-text so every run renders the same bytes.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = [
    "BOARD_TITLE",
    "COUNTER_INTRO",
    "COUNTER_TITLE",
    "DOC",
    "DOC_MARKER",
    "VIEW_BYTES",
    "board_filler",
    "board_view",
]

COUNTER_TITLE = "Counter"
COUNTER_INTRO = (
    "Each tab has its own count, kept on the server. Press + and the server adds one and sends the new "
    "count back over this tab's event stream; other tabs keep theirs. The count is shown by the "
    "element below, which the browser updates when the patch arrives, without reloading the page."
)
BOARD_TITLE = "Visitors"
VIEW_BYTES = 300
#: The last element of the documentation page: its presence says the page arrived whole.
DOC_MARKER = 'id="doc-end"'


def board_filler(value: int) -> str:
    """The fragment's last paragraph: as long as it takes to make :func:`board_view` ``VIEW_BYTES``."""
    head = f'<section id="board" data-n="{value}"><h2>{BOARD_TITLE}</h2><p>Count <b id="nv">{value}</b></p><p>'
    pad = max(0, VIEW_BYTES - len(head) - len("</p></section>"))
    return ("lorem ipsum dolor sit amet " * (pad // 27 + 1))[:pad]


def board_view(value: int) -> str:
    """The shared fragment, ``VIEW_BYTES`` long (``bench.apps_broadcast._view_markup``'s markup)."""
    return (
        f'<section id="board" data-n="{value}"><h2>{BOARD_TITLE}</h2><p>Count <b id="nv">{value}</b></p>'
        f"<p>{board_filler(value)}</p></section>"
    )


_TEXT = (
    "the server context signal action view stream tab page scope route session browser patch event "
    "render template request response handler value state update client connection frame broadcast "
    "compression encoder worker process memory timeout revival snapshot cookie secret origin header "
    "body query path method status error message config option default limit queue write read open "
    "close start stop each every one many first last new old same other small large fast slow"
)
_WORDS = tuple(_TEXT.split())


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 16))]
    return words[0].capitalize() + " " + " ".join(words[1:]) + "."


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng) for _ in range(sentences))


def _doc() -> dict[str, Any]:
    rng = random.Random(22)
    sections = []
    for i in range(1, 11):
        name = f"{rng.choice(_WORDS).capitalize()} and {rng.choice(_WORDS)}"
        code = "\n".join(
            f'{rng.choice(_WORDS)}_{j} = app.{rng.choice(_WORDS)}({rng.randint(0, 99)}, "{rng.choice(_WORDS)}")'
            for j in range(5)
        )
        sections.append(
            {
                "id": f"s{i}",
                "title": f"{i}. {name}",
                "paragraphs": [_paragraph(rng, rng.randint(3, 4)) for _ in range(3)],
                "code": code,
                "points": [_sentence(rng) for _ in range(3)],
                "rows": [
                    (f"{rng.choice(_WORDS)}_{k}", rng.choice(("int", "str", "float", "bool")), _sentence(rng))
                    for k in range(3)
                ],
            }
        )
    return {
        "title": "Reference: streams, scopes and signals",
        "nav": [(f"#{s['id']}", s["title"]) for s in sections],
        "intro": _paragraph(rng, 4),
        "sections": sections,
        "footer": "Generated documentation page for the side-by-side benchmark.",
    }


DOC = _doc()
