"""The bibliography's labels in the form the chapters cite: "Vaswani et al., 2017".

The chapters cite with ``{cite:p}`` in author-year form (``bibtex_reference_style:
author_year``); pybtex's ``plain`` style would label the same entries [1], [2], ... This
extension registers the style ``plain_author_year``: pybtex's ``plain`` formatting with
author-year labels (a, b, ... appended when two entries would share a label).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle


def _surname(person) -> str:
    return re.sub(r"[{}]", "", " ".join(person.prelast_names + person.last_names))


def _label(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    if not people:
        who = entry.key
    elif len(people) == 1:
        who = _surname(people[0])
    elif len(people) == 2:
        who = f"{_surname(people[0])} and {_surname(people[1])}"
    else:
        who = f"{_surname(people[0])} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabels(BaseLabelStyle):
    """Labels "Surname, year", "A and B, year" or "A et al., year", made unique."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [_label(entry) for entry in entries]
        repeated = Counter(labels)
        seen: dict[str, int] = defaultdict(int)
        for label in labels:
            if repeated[label] > 1:
                seen[label] += 1
                label = f"{label}{chr(ord('a') + seen[label] - 1)}"
            yield label


class PlainAuthorYear(PlainStyle):
    default_label_style = "author_year"


def setup(app):
    register_plugin("pybtex.style.labels", "author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "plain_author_year", PlainAuthorYear)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
