"""Components: named parts of one page, each with its own signals, actions and view.

``c.component(setup, "apples")`` runs ``setup(comp)``, which declares on ``comp`` what a page
declares on ``c``. Its ids get the component's name as a prefix (signal ``apples__n``, which the
browser holds as ``_apples__n`` because only the server writes it; action ``apples__inc``), so
one ``counter`` function serves two components; its HTML sits in ``<div id="c-apples">`` and
``comp.sync()`` re-renders and patches that element alone. Each component counts its renders:
click around and watch only one number move.
"""

from __future__ import annotations

import itertools

from pyvia import App, Context, Markup, html
from pyvia.components import Component

app = App(
    title="Components",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; }
  .cards { display: flex; gap: 1rem; flex-wrap: wrap; align-items: flex-start; }
  .card { border: 1px solid #ccc; border-radius: 8px; padding: .5rem 1rem 1rem; min-width: 12rem; }
  .card .value { font-size: 2rem; margin: .25rem 0; }
  .renders { display: block; color: #888; margin-top: .5rem; }
  .notes ul { padding-left: 1.2rem; }
  .notes li button { margin-left: .5rem; }
</style>"""
    ],
)

MAX_NOTES = 20
MAX_NOTE_LENGTH = 80


def counter(comp: Component, label: str) -> None:
    """A counter; the page uses it twice, as ``apples`` and ``pears``."""
    n = comp.signal(0, "n")
    renders = itertools.count(1)

    @comp.action
    def inc() -> None:
        n.value += 1
        comp.sync()  # patches <div id="c-{name}"> only, with the changed signals

    @comp.action
    def dec() -> None:
        n.value = max(0, n.as_int() - 1)
        comp.sync()

    name = comp.name
    comp.view(
        lambda: html(
            """
<section class="card">
  <h2>{label}</h2>
  <p class="value" id="{name}-value">{n}</p>
  <button id="{name}-dec" data-on:click="{dec}">&minus;</button>
  <button id="{name}-inc" data-on:click="{inc}">+</button>
  <small class="renders" id="{name}-renders">renders: {renders}</small>
</section>""",
            label=label,
            name=name,
            n=n.as_int(),
            dec=dec,
            inc=inc,
            renders=next(renders),
        )
    )


def notes(comp: Component) -> None:
    """A short list. ``items`` is server-owned: only the actions change it, and a revived tab gets it
    back from the signed snapshot the browser keeps. ``draft`` is the input the user types into;
    like every value from the browser, a note is escaped when rendered."""
    items = comp.signal([], "items")
    draft = comp.signal("", "draft", writable=True, max_length=MAX_NOTE_LENGTH)
    renders = itertools.count(1)

    @comp.action
    def add() -> None:
        text = draft.as_str().strip()[:MAX_NOTE_LENGTH]
        if text:  # the click cleared the input in the browser: the next note can be typed at once
            items.value = [*items.value, text][-MAX_NOTES:]
        comp.sync()

    @comp.action
    def remove(index: int) -> None:  # bound by the view: remove(index=2); a user may still post any int
        if 0 <= index < len(items.value):
            items.value = [t for i, t in enumerate(items.value) if i != index]
        comp.sync()

    def view() -> Markup:
        lines = (
            html(
                '<li id="note-{i}">{text}<button id="note-{i}-remove" data-on:click="{remove}">&times;</button></li>',
                i=i,
                text=str(text),
                remove=remove(index=i),
            )
            for i, text in enumerate(items.value)
        )
        return html(
            """
<section class="card notes">
  <h2>Notes</h2>
  <form id="notes-form" data-on:submit__prevent="{add}; {draft_ref} = ''">
    <input id="notes-draft" placeholder="Add a note" autocomplete="off" maxlength="{max_length}" {draft}>
    <button>Add</button>
  </form>
  <ul id="notes-list">{lines}</ul>
  <small class="renders" id="notes-renders">renders: {renders}</small>
</section>""",
            add=add,
            max_length=MAX_NOTE_LENGTH,
            draft=draft.bind(),
            draft_ref=draft.ref(),
            lines=lines,
            renders=next(renders),
        )

    comp.view(view)


@app.page("/")
def page(c: Context) -> None:
    apples = c.component(lambda comp: counter(comp, "Apples"), "apples")
    pears = c.component(lambda comp: counter(comp, "Pears"), "pears")
    notes_box = c.component(notes, "notes")

    @c.action
    def render_all() -> None:
        c.sync()  # the page's whole view, every component included

    def view() -> Markup:
        apples_n, pears_n = apples.signals["n"], pears.signals["n"]
        fruit = apples_n.as_int() + pears_n.as_int()
        return html(
            """
<main>
  <h1>Components</h1>
  <p>Fruit in total: <strong id="total" data-text="{total}">{fruit}</strong>
     (added up in the browser from the two components' signals)</p>
  <div class="cards">{apples}{pears}{notes_box}</div>
  <p><button id="render-all" data-on:click="{render_all}">Re-render the whole page</button></p>
</main>""",
            total=f"{apples_n.ref()} + {pears_n.ref()}",
            fruit=fruit,
            apples=apples,
            pears=pears,
            notes_box=notes_box,
            render_all=render_all,
        )

    c.view(view)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
