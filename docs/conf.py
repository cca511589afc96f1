"""Sphinx configuration of the jupyter-cleverthis manual (`make docs`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "jupyter-cleverthis"
author = "CleverThis"
copyright = "CleverThis"
release = version = json.loads((HERE.parent / "js" / "package.json").read_text())["version"]

extensions = ["myst_parser", "cleverthis_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]

# Every internal link must resolve: headings get anchors (`page.md#heading`), and a broken one is a warning,
# which `make docs` (-W -n) turns into an error. Nothing is fetched from the network.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist", "attrs_inline"]
nitpicky = True
suppress_warnings: list[str] = []

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-cleverthis"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_show_sourcelink = False
