"""Draw the preface's map of the chapters into book/figures/generated/chapter_map.svg.

Chapters whose notebook exists are drawn solid; planned ones dashed. `make book` runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from transformer_book.course.figures.book import chapter_map

ROOT = Path(__file__).resolve().parents[1]
COURSE = [
    (
        "I  Sequences",
        [
            ("00", "How to use this book"),
            ("01", "Sequence modelling and transduction"),
            ("02", "Recurrent networks"),
            ("03", "Convolutional sequence models"),
        ],
    ),
    (
        "II  Attention",
        [
            ("04", "Attention as weighted averaging"),
            ("05", "Self-attention"),
            ("06", "Multi-head attention"),
            ("07", "Cross-attention"),
            ("08", "Positional encoding"),
        ],
    ),
    (
        "III  The Transformer",
        [
            ("09", "The full model"),
            ("10", "Training on real data"),
            ("11", "Decoding and evaluation"),
            ("12", "Scaling up"),
            ("13", "Ablations"),
        ],
    ),
]


def main() -> int:
    available = {path.name[:2] for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    parts = [
        (title, [(number, name, number in available) for number, name in chapters])
        for title, chapters in COURSE
    ]
    target = ROOT / "book" / "figures" / "generated" / "chapter_map.svg"
    target.parent.mkdir(parents=True, exist_ok=True)
    chapter_map(parts).savefig(target, metadata={"Date": None})
    print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
