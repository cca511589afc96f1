"""How the widgets' front-end reaches the page: a small ESM that imports the built bundle once per page.

anywidget gives each model two seconds to import its `_esm` and initialize, and it imports a fresh copy of the
source per model. The built bundle (js/src/widget.ts with plotly, over a megabyte) can take longer than that to
parse on a loaded machine, most of all when a notebook opens with several widgets, and the model then fails
("[anywidget] Failed to initialize model."). So `_esm` is this loader: it imports the bundle, travelling as the
`_bundle` trait, in `render` (which anywidget awaits without a deadline), once per page for each build (keyed
by its hash), and every later widget reuses that module.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

STATIC = Path(__file__).parent / "static"
NOT_BUILT = (
    "export default { render({ el }) { el.textContent = 'jupyter-cleverthis: front-end not built (make install)'; } };"
)

LOADER = """
const modules = (globalThis.__jupyterCleverthisWidgets ??= new Map());

function bundle(model) {
  const id = model.get("_bundle_id");
  let module = modules.get(id);
  if (!module) {
    const url = URL.createObjectURL(new Blob([model.get("_bundle")], { type: "text/javascript" }));
    module = import(url).finally(() => URL.revokeObjectURL(url));
    module.catch(() => modules.delete(id));  // a failed import is tried again by the next widget
    modules.set(id, module);
  }
  return module;
}

export default {
  async render({ model, el }) {
    const module = await bundle(model);
    return module.default.render({ model, el });
  }
};
"""


def source() -> str:
    """The built bundle's text, or a one-line module saying it is not built."""
    f = STATIC / "widget.js"
    return f.read_text(encoding="utf-8") if f.exists() else NOT_BUILT


def source_id(text: str) -> str:
    """Names one build: the page keeps one module per build."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


SOURCE = source()


def css() -> Path | str:
    f = STATIC / "widget.css"
    return f if f.exists() else ""
