"""Read the built book in headless Chromium, as a reader would, and report what is wrong.

    python scripts/book_browser.py _build/html                 # every page, 1400 and 390 px
    python scripts/book_browser.py _build/html --shots DIR     # and a screenshot of each

The book is served on 127.0.0.1 and every request for another host is refused, so the
pages are read as a reader offline sees them. At each width every page must have:

- no horizontal page scroll, and no element wider than the text column except inside a
  scroll container (code cells, outputs, display math and wide tables scroll on their own);
- its math typeset by a MathJax that the book serves itself, with no raw TeX left in the
  text (``\\(``, ``\\[``, ``$...$``);
- no directive or role markup left as text (``{exercise}``, ``{cite:p}``);
- a real alt text on every image (not empty, not a file name), and every image drawn in
  its own proportions;
- one search box, and bibliography entries labelled as they are cited (author, year);
- at 1400 px and wider, code cells and their outputs within the column (no sideways
  scrolling: the notebooks keep to 88 characters).

Every internal link (``href`` and ``src``) must resolve to a file of the build, and a link
with a ``#fragment`` to an element with that id. Exit status 1 when anything is wrong, 2 on
bad arguments. Chromium is Debian's ``chromium`` (or ``$CHROMIUM``), driven by Playwright.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
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

# Runs in the page after MathJax has typeset it; returns a list of [kind, detail].
PAGE_CHECKS = r"""
(codeMustFit) => {
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
    const box = img.getBoundingClientRect();
    if (img.naturalWidth > 0 && box.width > 0 && box.height > 0) {
      const drawn = box.width / box.height, natural = img.naturalWidth / img.naturalHeight;
      if (Math.abs(drawn / natural - 1) > 0.03) {
        const size = `${Math.round(box.width)}x${Math.round(box.height)}`;
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


@dataclass(frozen=True)
class Problem:
    """One thing a reader would see wrong: on ``page`` at ``width`` px (0: any width)."""

    page: str
    width: int
    kind: str
    detail: str

    def __str__(self) -> str:
        where = f"{self.page} @ {self.width}px" if self.width else self.page
        return f"{where}: {self.kind}: {self.detail}"


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


def check_pages(root: Path, pages: list[str], widths=WIDTHS,
                shots: Path | None = None) -> list[Problem]:
    """Open each page at each width in headless Chromium, offline; the problems found."""
    from playwright.sync_api import sync_playwright

    problems = []
    with serve(root) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(),
                                             args=["--no-sandbox"])
        for width in widths:
            context = browser.new_context(viewport={"width": width, "height": 900})
            context.route("**/*", lambda route: route.continue_()
                          if route.request.url.startswith(url) else route.abort())
            page = context.new_page()
            for rel in pages:
                page.goto(url + rel, wait_until="load")
                if page.evaluate(WAIT_FOR_MATH) == "not loaded":
                    problems.append(Problem(rel, width, "mathjax-missing",
                                            "the page asks for MathJax but it did not load"))
                for kind, detail in page.evaluate(PAGE_CHECKS, width >= CODE_FITS_FROM):
                    problems.append(Problem(rel, width, kind, detail))
                if shots is not None:
                    shot = shots / f"{rel.replace('/', '_').removesuffix('.html')}-{width}.png"
                    page.screenshot(path=str(shot), full_page=False)
            context.close()
        browser.close()
    return problems


def check_book(root: str | Path, widths=WIDTHS, shots: str | Path | None = None,
               pages: list[str] | None = None) -> list[Problem]:
    """Everything this module checks, over the built book at ``root`` (its ``html`` folder)."""
    root = Path(root)
    if not (root / "index.html").is_file() and not list(root.glob("*.html")):
        raise FileNotFoundError(f"root: expected a built HTML book folder, got {root}")
    pages = pages_of(root) if pages is None else pages
    if shots is not None:
        Path(shots).mkdir(parents=True, exist_ok=True)
    return check_links(root, pages) + check_pages(
        root, pages, widths, None if shots is None else Path(shots))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="the built book's HTML folder, e.g. _build/html")
    parser.add_argument("--width", type=int, action="append", help="window widths (px)")
    parser.add_argument("--shots", help="save a screenshot of every page here")
    parser.add_argument("--page", action="append", help="only these pages (relative paths)")
    args = parser.parse_args(argv)
    if not Path(args.root).is_dir():
        parser.error(f"root: expected the built book's HTML folder, got {args.root!r}")
    problems = check_book(args.root, tuple(args.width or WIDTHS), args.shots, args.page)
    pages = args.page or pages_of(Path(args.root))
    for problem in problems:
        print(problem)
    widths = ", ".join(f"{w} px" for w in (args.width or WIDTHS))
    print(f"{len(pages)} pages at {widths}: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
