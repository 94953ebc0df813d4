"""Each inline script once per page.

sphinx-thebe adds its configuration as an inline script (``const THEBE_JS_URL = ...``)
through ``app.add_js_file(None, body=...)``; Sphinx keeps that entry twice (once as ``None``
and once as ``""``), and the second copy redeclares the constants: an error in every page's
console. This handler drops the repeat of any script already in the page's list.
"""

from __future__ import annotations


def _key(script) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    return (getattr(script, "filename", script) or "", tuple(sorted(attributes.items())))


def _once(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        key = _key(script)
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _once)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
