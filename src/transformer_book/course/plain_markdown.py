"""The book's MyST markup rewritten as plain Markdown that any notebook viewer renders.

The HTML book understands MyST directives (```` ```{exercise} ````, ```` ```{note} ````,
``{figure}``...) and roles (``{cite:p}`key```, ``{ref}`label```); JupyterLab, Colab and
GitHub's viewer show them as raw text. :func:`to_plain_markdown` turns them into ordinary
Markdown: an exercise becomes a ``### Exercise NN.K · Title`` heading and its body, an
admonition a block quote with a bold title, a figure an image with its caption, a citation
"Author (Year)" read from ``book/references.bib`` (:func:`read_citations`, a small BibTeX
reader that is enough for the book's own file), cross-references their text. Fenced code
and inline code are left as they are.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from transformer_book.course.exercise_cells import id_from_label

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
DIRECTIVE_INFO = re.compile(r"^\{(?P<name>[\w:-]+)\}[ \t]*(?P<argument>.*)$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")
ROLE = re.compile(r"\{(?P<name>[a-z][\w:+-]*)\}`(?P<content>[^`]+)`")
ROLE_OR_CODE = re.compile(ROLE.pattern + r"|(?P<code>(?P<ticks>`+)[^`].*?(?P=ticks))")
TARGET_LINE = re.compile(r"^\([\w:.-]+\)=[ \t]*$")
EQUATION_LABEL = re.compile(r"(\$\$)[ \t]*\([\w:.-]+\)[ \t]*$")
ADMONITIONS = {
    "note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
    "seealso", "admonition", "margin", "sidebar", "epigraph", "topic", "dropdown", "card",
}
_LATEX_ACCENTS = {'"': "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", "~": "\u0303"}
_LATEX_LETTERS = {"L": "Ł", "l": "ł", "o": "ø", "O": "Ø", "ss": "ß", "aa": "å", "i": "ı"}


def _latex_to_text(value: str) -> str:
    """``Kaiser, {\\L}ukasz`` -> ``Kaiser, Łukasz``; accents combine with their letter."""
    value = re.sub(
        r"\\([\"'`^~])\{?([A-Za-z])\}?",
        lambda m: m[2] + _LATEX_ACCENTS[m[1]],
        value,
    )
    value = re.sub(r"\\(ss|aa|[LloOi])\b ?", lambda m: _LATEX_LETTERS[m[1]], value)
    return unicodedata.normalize("NFC", value.replace("{", "").replace("}", ""))


def _surname(author: str) -> str:
    author = author.strip()
    if "," in author:
        return author.split(",")[0].strip()
    return author.split()[-1] if author.split() else author


def _field(body: str, name: str) -> str | None:
    """The value of ``name = {...}`` (braces balanced) or ``name = "..."`` in an entry."""
    match = re.search(rf"\b{name}\s*=\s*", body, re.I)
    if not match:
        return None
    start = match.end()
    if body[start:start + 1] == '"':
        end = body.index('"', start + 1)
        return body[start + 1:end]
    if body[start:start + 1] != "{":
        return re.match(r"[^,}\s]*", body[start:])[0]
    depth = 0
    for index in range(start, len(body)):
        depth += {"{": 1, "}": -1}.get(body[index], 0)
        if depth == 0:
            return body[start + 1:index]
    return body[start + 1:]


def read_citations(bib_path: Path | str) -> dict[str, tuple[str, str]]:
    """:func:`parse_citations` of the BibTeX file ``bib_path``."""
    return parse_citations(Path(bib_path).read_text(encoding="utf-8"))


def parse_citations(text: str) -> dict[str, tuple[str, str]]:
    """BibTeX key -> ``(authors, year)``, authors as "Vaswani et al.", "Kaiser and Bengio"."""
    citations = {}
    for match in re.finditer(r"@\w+\s*\{\s*(?P<key>[^,\s]+)\s*,", text):
        following = text.find("\n@", match.end())
        body = text[match.end():following if following >= 0 else len(text)]
        names = (_field(body, "author") or "").split(" and ")
        authors = [_surname(_latex_to_text(a)) for a in names if a.strip()]
        year = _latex_to_text(_field(body, "year") or "n.d.")
        if len(authors) > 2:
            names = f"{authors[0]} et al."
        else:
            names = " and ".join(authors) or match["key"]
        citations[match["key"]] = (names, year)
    return citations


def _cite(name: str, content: str, citations: dict[str, tuple[str, str]]) -> str:
    keys = [key.strip() for key in content.split(",") if key.strip()]
    found = [citations.get(key, (key, "")) for key in keys]
    if name == "cite:t" or name == "cite:author":
        return "; ".join(f"{who} ({year})" if year else who for who, year in found)
    inner = "; ".join(f"{who} {year}".strip() for who, year in found)
    return inner if name == "cite:ps" else f"({inner})"


def _reference_text(content: str) -> str:
    explicit = re.fullmatch(r"(?s)(?P<text>.*?)\s*<(?P<target>[^>]+)>", content)
    if explicit and explicit["text"].strip():
        text = re.sub(r"\s*(\{number\}|\{name\}|%s)\s*", " ", explicit["text"])
        return text.strip()
    target = explicit["target"] if explicit else content
    exercise = id_from_label(target)
    if exercise:
        return f"exercise {exercise}"
    return target.rsplit("/", 1)[-1].replace("-", " ").replace("_", " ")


def convert_role(name: str, content: str, citations: dict[str, tuple[str, str]]) -> str:
    """One role as plain text: citations "Author (Year)", references their text, math $x$."""
    if name.startswith("cite"):
        return _cite(name, content, citations)
    if name == "math":
        return f"${content}$"
    if name == "eq":
        return f"equation ({content})"
    if name in ("ref", "numref", "doc", "term", "prf:ref", "download", "sub-ref"):
        return _reference_text(content)
    if name in ("abbr", "sup", "sub", "kbd", "guilabel", "menuselection", "emphasis"):
        return re.sub(r"\s*\([^)]*\)$", "", content) if name == "abbr" else content
    return content


def convert_roles(line: str, citations: dict[str, tuple[str, str]]) -> str:
    """Every role in ``line`` rewritten, inline code spans left alone."""

    def replace(match: re.Match) -> str:
        if match["code"]:
            return match["code"]
        return convert_role(match["name"], match["content"], citations)

    return ROLE_OR_CODE.sub(replace, line)


def _split_options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    index = 0
    while index < len(body) and OPTION.match(body[index].strip()):
        option = OPTION.match(body[index].strip())
        options[option["key"]] = option["value"].strip()
        index += 1
    if index < len(body) and not body[index].strip():
        index += 1
    return options, body[index:]


def _blockquote(title: str, body: str) -> str:
    lines = [f"> **{title}**", ">"] if title else []
    lines += [f"> {line}".rstrip() for line in body.splitlines()]
    return "\n".join(lines)


def render_directive(name: str, argument: str, body: list[str], citations) -> str:
    """One directive (its body already split off) as plain Markdown."""
    options, content = _split_options(body)
    inner = to_plain_markdown("\n".join(content), citations).strip("\n")
    argument = convert_roles(argument.strip(), citations)
    if name == "exercise":
        exercise_id = id_from_label(options.get("label", ""))
        title = argument
        if exercise_id:
            title = re.sub(rf"^{re.escape(exercise_id)}\s*·\s*", "", argument)
        heading = " · ".join(part for part in (exercise_id, title) if part)
        return f"### Exercise {heading}".rstrip() + "\n\n" + inner
    if name in ("solution", "solution-start", "solution-end", "exercise-end"):
        return ""
    if name in ("figure", "image"):
        alt = options.get("alt", inner.splitlines()[0] if inner else "figure")
        picture = f"![{alt}]({argument})"
        return picture + (f"\n\n*{inner}*" if name == "figure" and inner else "")
    if name in ("math",):
        return f"$$\n{chr(10).join(content).strip()}\n$$"
    if name in ("code-block", "code", "code-cell", "sourcecode"):
        return f"```{argument}\n" + "\n".join(content) + "\n```"
    if name in ("toggle", "dropdown", "details"):
        summary = argument or "Details"
        return f"<details>\n<summary>{summary}</summary>\n\n{inner}\n\n</details>"
    if name in ADMONITIONS:
        title = argument if name in ("admonition", "sidebar", "topic", "card") else name.title()
        return _blockquote(title or name.title(), inner)
    if name.startswith("bibliography") or name in ("tableofcontents", "toctree", "glossary"):
        return ""
    return (f"**{argument}**\n\n" if argument else "") + inner


def _closing(lines: list[str], start: int, fence: str) -> int:
    """Index of the line closing ``fence`` opened at ``start`` (or len(lines))."""
    char, width = fence[0], len(fence)
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if stripped and set(stripped) == {char} and len(stripped) >= width:
            return index
    return len(lines)


def to_plain_markdown(source: str, citations: dict[str, tuple[str, str]]) -> str:
    """``source`` (a markdown cell) with every directive and role rewritten (module doc)."""
    lines, out, index = source.splitlines(), [], 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        if fence is None:
            if not TARGET_LINE.match(line.strip()):
                out.append(EQUATION_LABEL.sub(r"\1", convert_roles(line, citations)))
            index += 1
            continue
        end = _closing(lines, index, fence["fence"])
        directive = DIRECTIVE_INFO.match(fence["info"].strip())
        if directive is None:  # plain fenced code: kept as it is
            out.extend(lines[index:end + 1])
        else:
            out.append(render_directive(directive["name"], directive["argument"],
                                        lines[index + 1:end], citations))
        index = end + 1
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")
