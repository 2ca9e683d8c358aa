"""File uploads: pick one or more files, send them as a multipart form, download them again.

Datastar posts the form with ``@post(url, {contentType: 'form'})``; a form carries no signals, so
it holds the context id in a hidden ``via_ctx`` field. ``c.files_of("files")`` gives every file
of the ``multiple`` input (none when nothing was chosen); their bytes are kept in memory for the
browser session (``c.session_data``: the uploads themselves are closed once the action is
answered), and their list is a SESSION-scoped signal, so every tab of the browser shows the same
list. A download is a one-shot URL from ``c.download()``.

The session is the browser's own: the server issues its id, signed, and a planted cookie it never
issued is replaced, so nobody can share a session with a visitor by choosing its id in advance.

Progress: ``fetch()`` reports no upload progress, and neither do Datastar's fetch events (only
started, finished, error), so the page says honestly what it knows: ``data-indicator`` shows an
"uploading" bar while the request is in flight, and the server's answer replaces it.

Limits: each file may be up to 2 MiB. The browser checks before sending, so that a large file is
not sent for nothing, and the server checks again, since a browser can skip the check. A request
the server refuses outright (past its 16 MiB body limit, say) shows as an error too.
"""

from __future__ import annotations

import secrets
from typing import NamedTuple

from pyvia import App, Context, Markup, Scope, html

MAX_FILE = 2 * 1024 * 1024  # bytes, per file
MAX_KEPT = 20  # files kept per session; the oldest go first

app = App(
    title="File upload",
    head=[
        """<style>
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 44rem; }
  form { display: flex; gap: .8rem; align-items: center; flex-wrap: wrap; }
  progress { width: 12rem; }
  #status.error { color: #b00020; } #status.ok { color: #1b5e20; }
  table { border-collapse: collapse; width: 100%; margin-top: 1rem; }
  th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid #ddd; }
  td.size { text-align: right; white-space: nowrap; }
  button.link { background: none; border: 0; color: #1a0dab; text-decoration: underline; cursor: pointer; padding: 0; }
</style>"""
    ],
)


def human(size: int) -> str:
    """A size for people: 512 B, 1.5 KiB, 2.0 MiB."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size / 1024 / 1024:.1f} MiB"


class StoredFile(NamedTuple):
    """An uploaded file kept for the session: its bytes are copied out of the upload."""

    filename: str
    content_type: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


def listing(stored: dict[str, StoredFile]) -> list[dict[str, object]]:
    """What the page shows of the stored files (the bytes stay on the server)."""
    return [{"id": key, "name": f.filename, "size": f.size, "type": f.content_type} for key, f in stored.items()]


@app.page("/")
def uploads(c: Context) -> None:
    stored: dict[str, StoredFile] = c.session_data.setdefault("uploads", {})
    files = c.signal(listing(stored), "files", scope=Scope.SESSION)  # every tab of this browser
    status = c.signal("", "status")
    failed = c.signal(False, "failed")

    def report(message: str, *, error: bool) -> None:
        status.value, failed.value = message, error

    @c.action
    def upload() -> None:
        picked = c.files_of("files")
        if not picked:
            report("Choose one or more files first.", error=True)
            return
        too_big = [f for f in picked if f.size > MAX_FILE]
        if too_big:
            names = ", ".join(f"{f.filename} ({human(f.size)})" for f in too_big)
            report(f"Over the {human(MAX_FILE)} limit per file: {names}. Nothing was uploaded.", error=True)
            return
        for f in picked:
            stored[secrets.token_hex(6)] = StoredFile(f.filename, f.content_type, f.data)
        while len(stored) > MAX_KEPT:
            del stored[next(iter(stored))]
        files.value = listing(stored)
        total = human(sum(f.size for f in picked))
        report(f"Uploaded {len(picked)} file{'s' if len(picked) > 1 else ''} ({total}).", error=False)

    @c.action
    def download(file_id: str) -> None:  # bound by the view; another session's id finds nothing
        f = stored.get(file_id)
        if f is not None:  # a one-shot URL for this session; the page stays where it is
            c.redirect(c.download(f.data, f.filename, media_type=f.content_type))

    @c.action
    def remove(file_id: str) -> None:
        if stored.pop(file_id, None) is not None:
            files.value = listing(stored)

    # Checked in the browser before anything is sent; the server checks again. The status line is
    # server-owned: what the page writes into it here shows in this browser only, until the
    # server's next message.
    st, bad = status.ref(), failed.ref()
    submit = f"""
      const picked = [...document.getElementById('picker').files];
      const big = picked.filter(f => f.size > {MAX_FILE});
      if (!picked.length) {{ {st} = 'Choose one or more files first.'; {bad} = true }}
      else if (big.length) {{
        const names = big.map(f => f.name).join(', ');
        {st} = 'Over the {human(MAX_FILE)} limit per file: ' + names + '. Nothing was sent.';
        {bad} = true;
      }} else {{
        const bytes = picked.reduce((n, f) => n + f.size, 0);
        $_sending = 'Uploading ' + picked.length + ' file(s), ' + (bytes / 1024).toFixed(1) + ' KiB…';
        {st} = '';
        @post('{upload.url}', {{contentType: 'form', requestCancellation: 'disabled'}}).then(() => el.reset());
      }}"""
    refused = (
        "evt.detail.el === el && evt.detail.type === 'error' && "
        f"({st} = 'The server refused the upload (HTTP ' + evt.detail.argsRaw.status + ').', {bad} = true)"
    )

    def view() -> Markup:
        rows = [
            html(
                """<tr id="file-{id}"><td class="name">{name}</td>
              <td class="size">{size}</td><td>{type}</td>
              <td><button class="link download" data-on:click="{download}">Download</button>
                <button class="link remove" data-on:click="{remove}">Remove</button></td></tr>""",
                id=f["id"],
                name=str(f["name"]),
                size=human(int(f["size"])),
                type=str(f["type"]),
                download=download(file_id=f["id"]),
                remove=remove(file_id=f["id"]),
            )
            for f in files.value
        ]
        table = (
            html('<table id="files"><tr><th>Name</th><th>Size</th><th>Type</th><th></th></tr>{}</table>', rows)
            if rows
            else html('<p id="files">No files yet.</p>')
        )
        return html(
            """
<main>
  <h1>File upload</h1>
  <form id="upload" enctype="multipart/form-data" data-signals="{{_sending: ''}}" data-indicator="_uploading"
        data-on:submit__prevent="{submit}" data-on:datastar-fetch="{refused}">
    <input type="hidden" name="via_ctx" value="{ctx}">
    <input id="picker" type="file" name="files" multiple>
    <button id="send" data-attr:disabled="$_uploading">Upload</button>
  </form>
  <p id="progress" data-show="$_uploading" style="display: none">
    <progress></progress> <span data-text="$_sending"></span></p>
  <p id="status" data-text="{status_ref}" data-class="{{error: {failed}, ok: !{failed}}}">
    {status}</p>
  <p><small>Up to {max_file} per file; the newest {max_kept} files of this browser are kept
    (in memory).</small></p>
  {table}
</main>""",
            submit=submit,
            refused=refused,
            ctx=c.id,
            status_ref=status.ref(),
            failed=failed.ref(),
            status=status.as_str(),
            max_file=human(MAX_FILE),
            max_kept=MAX_KEPT,
            table=table,
        )

    c.view(view)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=3000)
