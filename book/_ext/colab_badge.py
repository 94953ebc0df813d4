"""The "Open in Colab" badge, served by the book itself.

Each notebook's first cell shows Colab's badge as a remote image
(``scripts/sync_notebooks.py`` writes it, so that GitHub and Colab show it too). In the
book, a page must ask no other host for anything: this transform points the badge's image at
the book's own copy, ``_static/colab-badge.svg``, which Sphinx copies into the build. The
link around it still opens the chapter in Colab.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.transforms import SphinxTransform

REMOTE_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
# A leading "/" makes the path relative to the book's source folder (the repository root).
LOCAL_BADGE = "/_static/colab-badge.svg"


class LocalColabBadge(SphinxTransform):
    """Every image of the remote Colab badge shows the book's copy instead."""

    # after MyST has made the image nodes, before Sphinx collects the images (doctree-read)
    default_priority = 500

    def apply(self, **kwargs) -> None:
        for image in self.document.findall(nodes.image):
            if image.get("uri") == REMOTE_BADGE:
                image["uri"] = LOCAL_BADGE


def setup(app):
    app.add_transform(LocalColabBadge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
