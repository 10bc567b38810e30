"""Sphinx configuration of the documentation site (``nox -s docs`` builds it with warnings as errors).

The pages are Markdown (MyST) and reST under docs/; the README's sections, CONTRIBUTING.md and the
packages' READMEs are included from their own files, the API reference comes from the docstrings
(autodoc), and the op/family tables, the CLI's help and the benchmark plot pages are generated here,
at build time, into docs/_generated/ (ignored by git) from liger-core itself and benchmarks/results/.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))  # readme_tables: the README's table generator, reused for the site's tables

import site_generated  # noqa: E402

from liger_core import __version__  # noqa: E402

project = "Liger, multi-vendor"
author = "Liger contributors"
copyright = "Liger contributors"
release = version = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = f"{project} (liger-core {release})"
html_static_path: list[str] = []

# The docstrings name code in single backticks (`liger_core.ops.rms_norm.rms_norm`, `FAMILIES`): a
# Python cross-reference where the name resolves, plain code where it does not (nitpicky stays off,
# so prose names such as `x` or `sum` are not errors).
default_role = "py:obj"
nitpicky = False
# Google-style sections (Args:, Returns:) as the op declarations write them; no NumPy style.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_inherit_docstrings = False  # torch.nn.Module's docstrings are torch's, not ours

# README anchors (#install) and headings as link targets, GitHub's way.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]


# The repository's Markdown files the site shows as pages (by inclusion): a link to one of them (or to its
# folder) in any included text goes to that page.
PAGE_OF = {
    "README.md": "index",
    "CONTRIBUTING.md": "contributing",
    "benchmarks/README.md": "benchmarks",
    **{f"packages/{p}/README.md": f"packages/{p}" for p in site_generated.PACKAGES},
}
# Other repository paths render as code, or as links under this prefix when set (CI can point it at the
# commit being built, e.g. https://github.com/<owner>/<repo>/blob/<sha>/).
SOURCE_URL = os.environ.get("LIGER_DOCS_SOURCE_URL", "")


class RepositoryLinks(SphinxTransform):
    """Markdown links between the repository's files, resolved as the files themselves mean them.

    MyST resolves a link like ``[CONTRIBUTING.md](CONTRIBUTING.md)`` relative to the page that includes
    the text (docs/index.md), not to the file it was written in (README.md). This transform resolves it
    from the file that holds it: to the page showing that file, or to the path itself (as code, or a link
    under SOURCE_URL) for a file or folder the site does not show. A link to a path that exists nowhere is
    left to MyST, whose warning fails the strict build.
    """

    default_priority = 100  # after MyST has made its nodes, before the reading ends

    def apply(self, **kwargs) -> None:
        for node in list(self.document.findall(addnodes.pending_xref)) + list(
            self.document.findall(addnodes.download_reference)
        ):
            if node.get("reftype") != "myst" or not node.source:
                continue
            target = self._repository_path(node)
            if target is None:
                continue
            path, _, anchor = target.partition("#")
            page = PAGE_OF.get(path) or PAGE_OF.get(f"{path}/README.md")
            if page is not None:
                # MyST's own resolver takes it from here, and checks the anchor against the page's headings.
                new = addnodes.pending_xref(
                    "",
                    *node.children,
                    refdomain="doc",
                    reftype="myst",
                    reftarget=page,
                    reftargetid=anchor or None,
                    refdoc=self.env.docname,
                    refexplicit=node.get("refexplicit", True),
                )
            elif SOURCE_URL:
                new = nodes.reference("", "", *node.children, refuri=SOURCE_URL + target, internal=False)
            else:
                new = nodes.inline("", "", *node.children)
            new.source, new.line = node.source, node.line
            node.replace_self(new)

    def _repository_path(self, node) -> str | None:
        """The repository path (relative to its root, with its ``#anchor``) a link names, read from the file
        the link is written in; None for a path that exists nowhere."""
        if node.get("refdomain") == "doc":
            if node["reftarget"] in self.env.found_docs:
                return None  # a page of the site: MyST's
            # Otherwise MyST found the path relative to the including page (docs/packages/ for packages/<p>/README.md,
            # the same depth) and made it an absolute document name: the file, less its suffix.
            raw = node["reftarget"] + ".md" + (f"#{node['reftargetid']}" if node.get("reftargetid") else "")
        else:
            raw = node.get("reftarget", "")
        path, _, anchor = raw.partition("#")
        if not path or "://" in path:
            return None
        for base in (Path(node.source).parent, DOCS / Path(self.env.docname).parent):
            candidate = (base / path).resolve()
            if candidate.exists() and candidate.is_relative_to(ROOT):
                return candidate.relative_to(ROOT).as_posix() + (f"#{anchor}" if anchor else "")
        return None


def setup(app):
    site_generated.write_all(DOCS / "_generated")
    app.add_transform(RepositoryLinks)
