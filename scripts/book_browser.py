"""Read the built book in headless Chromium, as a reader would, and report what is wrong.

    python scripts/book_browser.py _build/html                 # every page, 1400 and 390 px
    python scripts/book_browser.py _build/html --shots DIR     # and a screenshot of each
    python scripts/book_browser.py _build/html --allow prose-length   # reported, not failed

The book is served on 127.0.0.1 and every request for another host is refused (and
reported), so the pages are read as a reader offline sees them. Every page is read at each
width (1,400 and 390 px) in the theme's light and dark modes, and must have:

- no request to another host and no error in the browser's console;
- no horizontal page scroll, and no element wider than the text column except inside a
  scroll container (code cells, outputs, display math and wide tables scroll on their own);
- its math typeset by a MathJax that the book serves itself, with no raw TeX left in the
  text (``\\(``, ``\\[``, ``$...$``);
- no directive or role markup left as text (``{exercise}``, ``{cite:p}``);
- a real alt text on every image (not empty, not a file name), and every image drawn in
  its own proportions;
- captions and notes (``caption``, ``figcaption``, a table's ``.tb-note``) at a WCAG AA
  contrast of at least 4.5:1 against the background they are drawn on;
- one search box, and bibliography entries labelled as they are cited (author, year);
- at 1400 px and wider, code cells and their outputs within the column (no sideways
  scrolling: the notebooks keep to 88 characters).

Each chapter (``notebooks/NN_*.html``) must also open as the design asks: a diagram (an
image) before its first visible code cell (one whose source is not collapsed behind a
toggle), that first visible cell at most 12 lines, and at most 4,000 words of prose (the
article's visible text outside code cells, outputs and math). The report prints these
numbers for every chapter.

Every internal link (``href`` and ``src``) must resolve to a file of the build, and a link
with a ``#fragment`` to an element with that id; no figure's title may run off the edge of
its picture (ink at the left, right or top edge of a PNG's top eighth).

Exit status 1 when anything is wrong (the kinds named by ``--allow`` are reported but do not
fail), 2 on bad arguments. Chromium is Debian's ``chromium`` (or ``$CHROMIUM``), driven by
Playwright.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import socketserver
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bs4 import BeautifulSoup

WIDTHS = (1400, 390)
# At this width and wider a code cell fits 88 characters (the notebooks' line length,
# notebooks/ruff.toml; _static/course.css sizes the font), so code cells and their outputs
# must not scroll.
CODE_FITS_FROM = 1400
SKIPPED_PAGES = {"search.html", "genindex.html"}
# The pydata theme's modes: each page is read in both (localStorage "mode" and "theme",
# which the theme reads before it draws, and which set html[data-theme]).
THEMES = ("light", "dark")
CHAPTER_PAGE = re.compile(r"^notebooks/\d\d_[^/]+\.html$")
# The design's limits for a chapter's opening and length (the house plan, "The chapters").
FIRST_CODE_MAX_LINES = 12
PROSE_MAX_WORDS = 4000
MIN_CONTRAST = 4.5  # WCAG AA, normal text

# Every kind of problem the report can name; `--allow KIND` reports a kind without failing.
KINDS = {
    "page-overflow": "the page scrolls sideways",
    "too-wide": "an element wider than the text column, outside a scroll container",
    "raw-tex": "TeX left as text",
    "raw-markup": "a MyST role or directive left as text",
    "mathjax-remote": "MathJax requested from another host",
    "mathjax-missing": "the page asks for MathJax but it did not load",
    "alt-text": "an image without a real alt text",
    "image-distorted": "an image drawn out of its proportions",
    "search-boxes": "more than one search box",
    "numbered-bibliography": "bibliography labelled [1], [2], not (author, year)",
    "code-scrolls": "a code cell or output that scrolls at 1,400 px",
    "broken-link": "an internal link to no file or no id",
    "figure-clipped": "a figure whose title runs off the edge of its picture",
    "remote-request": "a request to another host",
    "console-error": "an error in the browser's console",
    "theme-mode": "the page did not switch to the theme's light or dark mode",
    "contrast": f"a caption or note under {MIN_CONTRAST}:1 contrast",
    "diagram-first": "a chapter whose first visible code cell comes before any diagram",
    "first-code-lines": f"a chapter's first visible code cell over {FIRST_CODE_MAX_LINES} lines",
    "prose-length": f"a chapter with more than {PROSE_MAX_WORDS:,} words of prose",
}

# Runs in the page after MathJax has typeset it; returns a list of [kind, detail].
PAGE_CHECKS = r"""
([codeMustFit, minContrast]) => {
  const problems = [];
  const add = (kind, detail) => problems.push([kind, detail]);
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth + 1) {
    add("page-overflow",
        `the page is ${doc.scrollWidth} px wide in a ${doc.clientWidth} px window`);
  }
  const article = document.querySelector("article.bd-article") || document.querySelector("main")
    || document.body;
  const column = article.getBoundingClientRect();
  const scrolls = (el) => ["auto", "scroll", "hidden"].includes(getComputedStyle(el).overflowX);
  const describe = (el) => {
    const cls = (el.getAttribute("class") || "").split(/\s+/).filter(Boolean).slice(0, 2);
    const text = (el.innerText || el.getAttribute("alt") || "").trim().replace(/\s+/g, " ");
    const name = el.tagName.toLowerCase() + (cls.length ? "." + cls.join(".") : "");
    return `<${name}> "${text.slice(0, 60)}"`;
  };
  const walk = (el) => {
    for (const child of el.children) {
      const style = getComputedStyle(child);
      if (style.display === "none" || style.visibility === "hidden") continue;
      const box = child.getBoundingClientRect();
      if (box.width > 0 && (box.right > column.right + 1 || box.left < column.left - 1)) {
        add("too-wide", `${describe(child)} is ${Math.round(box.width)} px wide, ` +
            `${Math.round(Math.max(box.right - column.right, column.left - box.left))} px ` +
            `past a ${Math.round(column.width)} px column`);
        continue;
      }
      if (!scrolls(child)) walk(child);
    }
  };
  walk(article);

  const skip = "pre, code, script, style, mjx-container, .MathJax, textarea, .highlight";
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const rawTex = /\\\(|\\\)|\\\[|\\\]|\$\$|\$[^$\s][^$]*?[^$\s\\]\$|\$[^$\s]\$/;
  // a role such as {cite:p} or a directive such as {exercise}, left as text
  const rawMarkup = /\{(?:[a-z][a-z0-9-]*:)?[a-z][a-z0-9-]*\}/;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest(skip)) continue;
    const text = node.textContent;
    if (rawTex.test(text)) add("raw-tex", JSON.stringify(text.trim().slice(0, 80)));
    if (rawMarkup.test(text)) add("raw-markup", JSON.stringify(text.trim().slice(0, 80)));
  }
  for (const script of document.querySelectorAll("script[src]")) {
    const src = new URL(script.getAttribute("src"), location.href);
    if (/mathjax/i.test(src.href) && src.origin !== location.origin) {
      add("mathjax-remote", `MathJax comes from ${src.href}, not from the book`);
    }
  }
  for (const img of document.querySelectorAll("img")) {
    const alt = (img.getAttribute("alt") || "").trim();
    if (!alt || /\.(png|jpe?g|svg|gif|webp)$/i.test(alt)) {
      add("alt-text", `${img.getAttribute("src")} has alt ${JSON.stringify(alt)}`);
    }
    // the picture itself: the box less its padding and border (a dark theme frames images)
    const box = img.getBoundingClientRect(), style = getComputedStyle(img);
    const edge = (side) => parseFloat(style[`padding${side}`]) +
      parseFloat(style[`border${side}Width`]);
    const width = box.width - edge("Left") - edge("Right");
    const height = box.height - edge("Top") - edge("Bottom");
    if (img.naturalWidth > 0 && width > 0 && height > 0) {
      const drawn = width / height, natural = img.naturalWidth / img.naturalHeight;
      if (Math.abs(drawn / natural - 1) > 0.03) {
        const size = `${Math.round(width)}x${Math.round(height)}`;
        add("image-distorted", `${img.getAttribute("src")} is drawn ${size} px, not in ` +
            `the shape of its ${img.naturalWidth}x${img.naturalHeight} pixels`);
      }
    }
  }
  const searches = [...document.querySelectorAll(".search-button-field, input[type=search]")]
    .filter((el) => el.getBoundingClientRect().width > 0);
  if (searches.length > 1) add("search-boxes", `${searches.length} search boxes are shown`);
  for (const label of document.querySelectorAll("div.citation > span.label, .citation-label")) {
    if (/^\W*\d+\W*$/.test(label.textContent)) {
      add("numbered-bibliography", `entry labelled ${label.textContent.trim()}, cited by author`);
      break;
    }
  }
  // WCAG contrast of captions and notes, against the background they are drawn on
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 1;
  const paint = canvas.getContext("2d", {willReadFrequently: true});
  const rgba = (color) => {  // any CSS color, as [r, g, b] in 0-255 and alpha in 0-1
    paint.clearRect(0, 0, 1, 1);
    paint.fillStyle = "rgba(0, 0, 0, 0)";
    paint.fillStyle = color;
    paint.fillRect(0, 0, 1, 1);
    const [r, g, b, a] = paint.getImageData(0, 0, 1, 1).data;
    return [r, g, b, a / 255];
  };
  const over = (top, below) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a)).concat([1]);
  };
  const background = (el) => {
    const layers = [];
    for (let node = el; node; node = node.parentElement) {
      const color = rgba(getComputedStyle(node).backgroundColor);
      if (color[3] > 0) layers.push(color);
      if (color[3] >= 1) break;
    }
    return layers.reverse().reduce((below, top) => over(top, below), [255, 255, 255, 1]);
  };
  const luminance = (rgb) => {
    const [r, g, b] = rgb.slice(0, 3).map((c) => {
      c /= 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const hex = (rgb) => "#" + rgb.slice(0, 3)
    .map((c) => Math.round(c).toString(16).padStart(2, "0")).join("");
  const shown = (el) => !el.closest("details:not([open]) > :not(summary)")
    && (el.checkVisibility ? el.checkVisibility({visibilityProperty: true})
        : el.getClientRects().length > 0);
  for (const el of article.querySelectorAll("caption, figcaption, .tb-note")) {
    const texts = [el, ...el.querySelectorAll("*")].filter((node) =>
      [...node.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim()));
    for (const node of texts) {
      if (!shown(node)) continue;
      const back = background(node);
      const fore = over(rgba(getComputedStyle(node).color), back);
      const [hi, lo] = [luminance(fore), luminance(back)].sort((x, y) => y - x);
      const ratio = (hi + 0.05) / (lo + 0.05);
      if (ratio < minContrast) {
        add("contrast", `${describe(node)} is ${ratio.toFixed(2)}:1 ` +
            `(${hex(fore)} on ${hex(back)}), under ${minContrast}:1`);
        break;
      }
    }
  }
  if (codeMustFit) {
    for (const pre of article.querySelectorAll("div.cell_input pre, div.cell_output pre")) {
      if (pre.scrollWidth > pre.clientWidth + 1) {
        add("code-scrolls", `${describe(pre)} needs ${pre.scrollWidth - pre.clientWidth} px more`);
      }
    }
  }
  return problems;
}
"""

WAIT_FOR_MATH = """
async () => {
  const hasMathJax = [...document.querySelectorAll("script[src]")]
    .some((s) => /mathjax/i.test(s.src));
  if (!hasMathJax) return "none";
  const ready = () => window.MathJax && MathJax.startup && MathJax.startup.promise;
  for (let i = 0; i < 100 && !ready(); i++) await new Promise((r) => setTimeout(r, 50));
  if (!ready()) return "not loaded";
  await MathJax.startup.promise;
  return "typeset";
}
"""

# Runs in a chapter's page: what its opening and its length are, as a reader sees them.
CHAPTER_MEASURES = r"""
() => {
  const article = document.querySelector("article.bd-article") || document.querySelector("main")
    || document.body;
  // Shown: not inside a closed <details> (a collapsed cell or solution), not hidden by CSS.
  const shown = (el) => !el.closest("details:not([open]) > :not(summary)")
    && (el.checkVisibility ? el.checkVisibility({visibilityProperty: true})
        : el.getClientRects().length > 0);
  const firstCode = [...article.querySelectorAll("div.cell div.cell_input")].find(shown);
  let lines = null;
  if (firstCode) {
    const pre = firstCode.querySelector("pre");
    lines = (pre ? pre.textContent : firstCode.textContent).replace(/\s+$/, "")
      .split("\n").length;
  }
  // A diagram: an image drawn at least 120 x 80 px (not a badge or an icon), shown, before
  // the first visible code cell (anywhere, when no code cell is visible).
  const before = (el) => !firstCode
    || Boolean(el.compareDocumentPosition(firstCode) & Node.DOCUMENT_POSITION_FOLLOWING);
  const diagram = [...article.querySelectorAll("img, svg")].some((el) => {
    if (el.closest("mjx-container, .MathJax") || !shown(el) || !before(el)) return false;
    const box = el.getBoundingClientRect();
    return box.width >= 120 && box.height >= 80;
  });
  // Prose: the article's shown text outside code cells, outputs, code blocks, math and the
  // page's furniture (heading anchors, toggle labels, buttons).
  const skip = "div.cell_input, div.cell_output, pre, div.highlight, mjx-container, .MathJax, " +
    ".math, script, style, .headerlink, summary, button, nav";
  const blocks = "p, li, dt, dd, td, th, caption, figcaption, blockquote, h1, h2, h3, h4, " +
    "h5, h6, div, section, article";
  const text = [];
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  const visible = new Map();
  let block = null;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (parent.closest(skip)) continue;
    if (!visible.has(parent)) visible.set(parent, shown(parent));
    if (!visible.get(parent)) continue;
    const inside = parent.closest(blocks);
    if (inside !== block) text.push(" ");  // a word ends where its paragraph or cell ends
    block = inside;
    text.push(node.textContent);
  }
  const words = (text.join("").match(/\S+/g) || [])
    .filter((word) => /[\p{L}\p{N}]/u.test(word)).length;
  return {words: words, firstCodeLines: lines, diagram: diagram};
}
"""


@dataclass(frozen=True)
class Problem:
    """One thing a reader would see wrong: on ``page`` at ``width`` px (0: any width), in
    the ``theme``'s mode ("": any)."""

    page: str
    width: int
    kind: str
    detail: str
    theme: str = ""

    def __str__(self) -> str:
        where = f"{self.page} @ {self.width}px" if self.width else self.page
        where += f" ({self.theme})" if self.theme else ""
        return f"{where}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class Chapter:
    """How a chapter opens and how long it is, as read in the browser: the words of prose,
    the lines of the first visible code cell (None: no code cell is visible) and whether a
    diagram comes before that cell."""

    words: int
    first_code_lines: int | None
    diagram_first: bool

    def problems(self, page: str, width: int = 0, theme: str = "") -> list[Problem]:
        """The design's limits that this chapter breaks, as problems on ``page``."""
        found = []
        if not self.diagram_first:
            where = ("before its first visible code cell" if self.first_code_lines is not None
                     else "anywhere")
            found.append(Problem(page, width, "diagram-first", f"no diagram {where}", theme))
        if self.first_code_lines is not None and self.first_code_lines > FIRST_CODE_MAX_LINES:
            found.append(Problem(page, width, "first-code-lines",
                                 f"the first visible code cell has {self.first_code_lines} "
                                 f"lines, more than {FIRST_CODE_MAX_LINES}", theme))
        if self.words > PROSE_MAX_WORDS:
            found.append(Problem(page, width, "prose-length",
                                 f"{self.words:,} words of prose, more than "
                                 f"{PROSE_MAX_WORDS:,}", theme))
        return found

    def __str__(self) -> str:
        lines = "none visible" if self.first_code_lines is None else self.first_code_lines
        return (f"{self.words:>6,} words, first visible code cell: {lines} lines, "
                f"diagram before it: {'yes' if self.diagram_first else 'no'}")


def merge(problems: list[Problem], widths, themes) -> list[Problem]:
    """``problems`` with each one found at every width and in every theme given once, with
    width 0 and theme "" (and at every width once with width 0, in one theme)."""
    everywhere = len(widths) * len(themes)
    seen: dict[tuple[str, str, str], list[Problem]] = {}
    for problem in problems:
        seen.setdefault((problem.page, problem.kind, problem.detail), []).append(problem)
    merged = []
    for (page, kind, detail), found in seen.items():
        combos = {(p.width, p.theme) for p in found}
        if len(combos) == everywhere > 1:
            merged.append(Problem(page, 0, kind, detail))
            continue
        by_theme = {p.theme for p in found}
        for theme in sorted(by_theme, key=lambda t: (t != "", t)):
            at = sorted({p.width for p in found if p.theme == theme}, key=lambda w: -w)
            if len(at) == len(widths) > 1:
                merged.append(Problem(page, 0, kind, detail, theme))
            else:
                merged.extend(Problem(page, w, kind, detail, theme) for w in at)
    return merged


def pages_of(root: Path) -> list[str]:
    """The book's pages under ``root`` (relative POSIX paths), redirects and search skipped."""
    pages = []
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("_", ".")) or rel in SKIPPED_PAGES:
            continue
        head = path.read_text(encoding="utf-8", errors="replace")[:4000].lower()
        if 'http-equiv="refresh"' in head:
            continue
        pages.append(rel)
    return pages


def _local_target(page: Path, root: Path, link: str) -> tuple[Path, str] | None:
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
        return None
    path = unquote(parts.path)
    target = (page.parent / path).resolve() if path else page.resolve()
    if target.is_dir():
        target = target / "index.html"
    return target, unquote(parts.fragment)


@functools.cache
def _ids(path: Path) -> frozenset[str]:
    soup = BeautifulSoup(path.read_text(encoding="utf-8", errors="replace"), "html.parser")
    return frozenset(tag["id"] for tag in soup.find_all(id=True))


def check_links(root: Path, pages: list[str]) -> list[Problem]:
    """Every ``href``/``src`` of ``pages`` that points into the build resolves."""
    root = root.resolve()
    problems = []
    for rel in pages:
        page = root / rel
        soup = BeautifulSoup(page.read_text(encoding="utf-8", errors="replace"), "html.parser")
        for tag in soup.find_all(href=True) + soup.find_all(src=True):
            link = tag.get("href") or tag.get("src")
            resolved = _local_target(page, root, link)
            if resolved is None:
                continue
            target, fragment = resolved
            if not target.is_file() or not target.is_relative_to(root):
                problems.append(Problem(rel, 0, "broken-link", f"{link} (no such file)"))
            elif fragment and target.suffix == ".html" and fragment not in _ids(target):
                problems.append(Problem(rel, 0, "broken-link", f"{link} (no id {fragment!r})"))
    return problems


@functools.cache
def clipped_edges(path: Path) -> tuple[str, ...]:
    """The edges of the PNG at ``path`` that ink (a pixel darker than mid-grey) touches in
    its top eighth, where a figure's title is drawn: a title wider than its figure."""
    from PIL import Image

    with Image.open(path) as image:
        grey = Image.alpha_composite(Image.new("RGBA", image.size, "white"),
                                     image.convert("RGBA")).convert("L")
    width, height = grey.size
    band = max(4, height // 8)
    regions = {"left": (0, 0, 3, band), "right": (width - 3, 0, width, band),
               "top": (0, 0, width, 2)}
    return tuple(edge for edge, box in regions.items() if grey.crop(box).getextrema()[0] < 160)


def check_figures(root: Path, pages: list[str]) -> list[Problem]:
    """No figure (a PNG of the build) of ``pages`` has its title cut at an edge."""
    root = root.resolve()
    problems = []
    for rel in pages:
        page = root / rel
        soup = BeautifulSoup(page.read_text(encoding="utf-8", errors="replace"), "html.parser")
        for img in soup.select("div.cell_output img[src]"):  # the figures the cells drew
            resolved = _local_target(page, root, img["src"])
            if resolved is None or resolved[0].suffix.lower() != ".png":
                continue
            if resolved[0].is_file() and (edges := clipped_edges(resolved[0])):
                alt = " ".join(img.get("alt", "").split())[:60]
                problems.append(Problem(rel, 0, "figure-clipped",
                                        f"{img['src']} ({alt!r}): its title runs off its "
                                        f"{' and '.join(edges)} edge"))
    return problems


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 at a free port for the ``with`` block; yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the report says what matters
        pass


def chromium_path() -> str:
    """Debian's Chromium (``$CHROMIUM`` overrides); a clear error when it is missing."""
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not found:
        raise FileNotFoundError(
            "book_browser needs Chromium: install Debian's `chromium` package "
            "(apt-get install chromium) or set CHROMIUM to a Chromium executable")
    return found


class _Reader:
    """One browser tab at one width in one theme, offline: what each page it opens asks of
    other hosts and writes to the console is recorded."""

    def __init__(self, browser, url: str, width: int, theme: str):
        self.url, self.width, self.theme = url, width, theme
        self.context = browser.new_context(viewport={"width": width, "height": 900},
                                           color_scheme=theme)
        # the pydata theme reads these before it draws the page (html[data-theme])
        self.context.add_init_script(
            f"localStorage.setItem('mode', '{theme}'); localStorage.setItem('theme', '{theme}');")
        self.remote: list[str] = []
        self.errors: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))

    def _route(self, route) -> None:
        if route.request.url.startswith(self.url):
            route.continue_()
        else:
            self.remote.append(route.request.url)
            route.abort()

    def _console(self, message) -> None:
        source = (message.location or {}).get("url", "")
        if message.type == "error" and not (source and not source.startswith(self.url)):
            self.errors.append(message.text)  # a refused request is reported as remote

    def read(self, rel: str, shots: Path | None) -> tuple[list[Problem], Chapter | None]:
        """Open ``rel``; the problems a reader would see, and the chapter's measures."""
        self.remote.clear()
        self.errors.clear()
        self.page.goto(self.url + rel, wait_until="load")
        problems = []

        def add(kind: str, detail: str) -> None:
            problems.append(Problem(rel, self.width, kind, detail, self.theme))

        if self.page.evaluate(WAIT_FOR_MATH) == "not loaded":
            add("mathjax-missing", "the page asks for MathJax but it did not load")
        if self.page.evaluate("document.documentElement.dataset.theme || 'light'") != self.theme:
            add("theme-mode", f"html[data-theme] is not {self.theme!r} with the theme's "
                f"{self.theme} mode set")
        for kind, detail in self.page.evaluate(
                PAGE_CHECKS, [self.width >= CODE_FITS_FROM, MIN_CONTRAST]):
            add(kind, detail)
        chapter = None
        if CHAPTER_PAGE.match(rel):
            measured = self.page.evaluate(CHAPTER_MEASURES)
            chapter = Chapter(measured["words"], measured["firstCodeLines"],
                              measured["diagram"])
            problems += chapter.problems(rel, self.width, self.theme)
        for request in dict.fromkeys(self.remote):
            add("remote-request", f"asked another host for {request}")
        for error in dict.fromkeys(self.errors):
            add("console-error", error[:200])
        if shots is not None:
            suffix = "" if self.theme == "light" else f"-{self.theme}"
            name = f"{rel.replace('/', '_').removesuffix('.html')}-{self.width}{suffix}.png"
            self.page.screenshot(path=str(shots / name), full_page=False)
        return problems, chapter


def check_pages(root: Path, pages: list[str], widths=WIDTHS, shots: Path | None = None,
                themes=THEMES, chapters: dict[str, Chapter] | None = None) -> list[Problem]:
    """Open each page at each width in each theme in headless Chromium, offline; the
    problems found. ``chapters``, if given, receives each chapter page's measures (as read
    at the first width in the first theme)."""
    from playwright.sync_api import sync_playwright

    problems = []
    with serve(root) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(),
                                             args=["--no-sandbox"])
        for theme in themes:
            for width in widths:
                reader = _Reader(browser, url, width, theme)
                for rel in pages:
                    found, chapter = reader.read(rel, shots)
                    problems += found
                    if chapter is not None and chapters is not None:
                        chapters.setdefault(rel, chapter)
                reader.context.close()
        browser.close()
    return merge(problems, widths, themes)


def check_book(root: str | Path, widths=WIDTHS, shots: str | Path | None = None,
               pages: list[str] | None = None, themes=THEMES,
               chapters: dict[str, Chapter] | None = None) -> list[Problem]:
    """Everything this module checks, over the built book at ``root`` (its ``html`` folder);
    ``chapters``, if given, receives each chapter's measures."""
    root = Path(root)
    if not (root / "index.html").is_file() and not list(root.glob("*.html")):
        raise FileNotFoundError(f"root: expected a built HTML book folder, got {root}")
    pages = pages_of(root) if pages is None else pages
    if shots is not None:
        Path(shots).mkdir(parents=True, exist_ok=True)
    return check_links(root, pages) + check_figures(root, pages) + check_pages(
        root, pages, widths, None if shots is None else Path(shots), themes, chapters)


def _known_kind(kind: str) -> str:
    if kind not in KINDS:
        raise argparse.ArgumentTypeError(
            f"expected one of the kinds of problem ({', '.join(KINDS)}), got {kind!r}")
    return kind


def main(argv: list[str] | None = None) -> int:
    kinds = "\n".join(f"  {kind:<22}{meaning}" for kind, meaning in KINDS.items())
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=f"kinds of problem:\n{kinds}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", help="the built book's HTML folder, e.g. _build/html")
    parser.add_argument("--width", type=int, action="append", help="window widths (px)")
    parser.add_argument("--theme", action="append", choices=THEMES,
                        help="the theme's modes to read the pages in (default: both)")
    parser.add_argument("--shots", help="save a screenshot of every page here")
    parser.add_argument("--page", action="append", help="only these pages (relative paths)")
    parser.add_argument("--allow", action="append", default=[], type=_known_kind,
                        metavar="KIND", help="report problems of this kind without failing "
                        "(repeatable; the kinds are listed below)")
    args = parser.parse_args(argv)
    if not Path(args.root).is_dir():
        parser.error(f"root: expected the built book's HTML folder, got {args.root!r}")
    widths, themes = tuple(args.width or WIDTHS), tuple(args.theme or THEMES)
    chapters: dict[str, Chapter] = {}
    problems = check_book(args.root, widths, args.shots, args.page, themes, chapters)
    pages = args.page or pages_of(Path(args.root))
    failing = [p for p in problems if p.kind not in args.allow]
    for problem in problems:
        print(f"{problem}{'  (allowed)' if problem.kind in args.allow else ''}")
    if chapters:
        print("chapters:")
        for rel, chapter in sorted(chapters.items()):
            print(f"  {rel:<42} {chapter}")
    where = ", ".join(f"{w} px" for w in widths) + f", {' and '.join(themes)}"
    allowed = len(problems) - len(failing)
    print(f"{len(pages)} pages at {where}: {len(failing)} problems"
          + (f" ({allowed} more of the allowed kinds)" if allowed else ""))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
