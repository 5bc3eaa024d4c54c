"""GET /: the translation page, one hand-written HTML file with its script (page.html, shipped in the
package).

It loads nothing from elsewhere (no CDN, no build step), so that it works on an offline machine; the server's
settings go into it once, when the app is made, as the JSON its script starts from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources

SETTINGS_MARK = "/*SERVER_SETTINGS*/"


@dataclass(frozen=True)
class PageSettings:
    """What the page's controls start at and may go to: the server's decoding defaults (the length penalty a
    beam search takes, should the default be greedy search) and request limits, and the languages the model
    translates between (None: unknown)."""

    num_beams: int
    length_penalty: float
    max_beams: int
    max_length_penalty: float
    max_characters: int
    pair: tuple[str, str] | None


def page_html(settings: PageSettings) -> str:
    """page.html with `settings` in its script."""
    template = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
    # "<" escaped, so that no text in the settings can end the <script> element they sit in.
    return template.replace(SETTINGS_MARK, json.dumps(asdict(settings)).replace("<", "\\u003c"))
