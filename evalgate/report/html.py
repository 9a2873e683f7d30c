"""report.html: one self-contained, offline file a reviewer can trust with model output in it.

Every value is autoescaped (jinja2, StrictUndefined so a missing field fails loudly rather than
rendering blank). A Content-Security-Policy pins the page to its own inline style and script by
hash and forbids every fetch, so even a rendering bug could not load or run anything else.
The page reads fully with JavaScript off; the script only adds a filter box and expand-all.
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from evalgate.gate import GatePolicy
from evalgate.report._format import mde
from evalgate.report._view import RunView
from evalgate.report.svg import forest_plot

__all__ = ["render_html"]

TEMPLATES = Path(__file__).resolve().parent / "templates"


def new_environment() -> Environment:
    """A fresh Jinja environment over the report templates (autoescaped, strict); the probe's page
    adds its own filter to one (probe/report.py)."""
    return Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@cache
def environment() -> Environment:
    return new_environment()


def _source(name: str) -> str:
    """A static asset (CSS or JS) kept as a template file, so it ships as package data."""
    return environment().get_template(name).render().strip()


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_html(view: RunView) -> str:
    css, js = _source("_style.html.j2"), _source("_script.html.j2")
    # the per-category table's sort and filter: its own script, only on a page that has the table
    table_js = _source("_categories_script.html.j2") if view.categories else ""
    scripts = " ".join(_sha256(x) for x in (js, table_js) if x)
    csp = (
        f"default-src 'none'; style-src {_sha256(css)}; script-src {scripts}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            v=view,
            css=Markup(css),
            js=Markup(js),
            table_js=Markup(table_js),
            csp=csp,
            forest=forest_plot(view.rows, margin=view.margin),
            differing=[a for a in [*view.models, *view.args] if a.differs],
            reference_effect=mde(GatePolicy().power_floor),
        )
    )
