"""The viewer page: one self-contained HTML file (inline CSS and JavaScript, the data as embedded JSON).

The template, style sheet and script are package data (``assets/``). The data goes into a
``<script type="application/json">`` block with every ``<`` written as ``\\u003c``, so no transcript text (a
``</script>`` in a debater's answer, say) can end the block early; ``JSON.parse`` reads it back unchanged.

>>> html = render_page({"kind": "rollout", "questions": [{"text": "</script><b>x"}]}, title="a <run>")
>>> "</script><b>" in html, embedded_data(html)["questions"][0]["text"]
(False, '</script><b>x')
>>> "<title>a &lt;run&gt;</title>" in html
True
"""

from __future__ import annotations

import html as html_lib
import json
import re
from importlib import resources
from typing import Any

ASSETS = ("view.html", "view.css", "view.js")
_DATA_BLOCK = re.compile(r'<script type="application/json" id="view-data">(.*?)</script>', re.S)


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """``data`` as JSON safe inside an HTML ``<script>`` block (every ``<`` escaped; still valid JSON).

    >>> embed_json({"t": "</script>"})
    '{"t": "\\\\u003c/script>"}'
    >>> json.loads(embed_json({"t": "</script>"}))
    {'t': '</script>'}
    """
    return json.dumps(data, ensure_ascii=False, default=str).replace("<", "\\u003c")


def render_page(document: dict[str, Any], *, title: str) -> str:
    """The whole HTML page for a viewer document (:func:`metamod.evaluate.view.data.load_run`)."""
    page = _asset("view.html")
    page = page.replace("{{TITLE}}", html_lib.escape(title))
    page = page.replace("{{CSS}}", _asset("view.css"))
    page = page.replace("{{JS}}", _asset("view.js"))
    return page.replace("{{DATA}}", embed_json(document))  # last: the data may hold any text


def embedded_data(page: str) -> Any:
    """The document embedded in a viewer page (for tests and tools that read a written page back)."""
    match = _DATA_BLOCK.search(page)
    if match is None:
        raise ValueError("no viewer data block in this page")
    return json.loads(match.group(1))
