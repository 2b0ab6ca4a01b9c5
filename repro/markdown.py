"""Text that came from a file (a record's note or reason, a machine's name, a constant output, a recipe name) as it
may stand in a generated Markdown page: shown literally, never as markup. `|` would split a table cell, a newline
end its row, and `<`, `>`, `&` open HTML (a page shown on the web runs `<script>` or `<img onerror=...>`)."""

from __future__ import annotations

import html


def escape(text) -> str:
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")
