"""Sphinx configuration of the sklearn_compat documentation.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` from the checkout
(``.ci/run`` does so after the tests).  Prose is MyST Markdown, the API reference comes from
the numpydoc docstrings through autosummary, and ``examples/`` is executed into the gallery.
"""

import os
import re
import sys
import warnings
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# Document the checkout being built, not whatever copy is installed elsewhere.
sys.path.insert(0, str(ROOT))
# The gallery's scripts import their sibling helpers (``from _digit_models import ...``).
sys.path.insert(0, str(ROOT / "examples"))

import sklearn_compat  # noqa: E402

project = "sklearn_compat"
author = "the sklearn_compat developers"
copyright = "the sklearn_compat developers, BSD-3-Clause"
version = release = sklearn_compat.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx_design",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md", "**/README.md", "auto_examples/*.ipynb"]
templates_path = ["_templates"]

# MyST: ``(label)=`` targets, ```{directive}``` fences, $math$ and :::-fenced notes.
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# API reference: one generated page per public name, numpydoc sections rendered.
autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
# The included benchmarks page is generated; its heading levels are the generator's.
suppress_warnings = ["myst.header"]

# The example gallery: every script of examples/ is executed (not only plot_*), in the order
# of the file names.  The scripts take no arguments: each is a story in cells, on data that
# ship with the package or that it builds itself in seconds.
sphinx_gallery_conf = {
    "examples_dirs": [str(ROOT / "examples")],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/[^/]*\.py$",
    "ignore_pattern": r"(^|/)_[^/]*\.py$",  # helpers (_digit_models.py), __init__.py
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
    "plot_gallery": "True",
    "abort_on_example_error": True,
    # "Examples using X" on each API page.
    "doc_module": ("sklearn_compat",),
    "backreferences_dir": "api/generated/backreferences",
}

html_theme = "pydata_sphinx_theme"
html_title = f"sklearn_compat {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 5,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_show_sourcelink = False
html_css_files = ["custom.css"]
# Pages without sub-pages need no section navigation on the left.
html_sidebars = {
    page: [] for page in ("index", "getting_started", "benchmarks", "methods", "development")
}

# Executed examples may print torch/sklearn warnings; the build fails on Sphinx's own ones.
warnings.filterwarnings(
    "ignore", category=UserWarning, message="Matplotlib is currently using agg"
)
os.environ.setdefault("MPLBACKEND", "agg")


# Docstrings follow scikit-learn's plain-text conventions, which reST reads differently in two
# places: a fitted attribute's name in a shape, "(n_samples, n_features_in_)", is a link
# target ("name_"), and "*args, **kwargs" opens emphasis.  Escape both outside literals before
# numpydoc parses the docstring, so the docstrings stay readable in help() as written.
_LITERAL = re.compile(r"(`+[^`]*`+)")
_TRAILING_UNDERSCORE = re.compile(r"\b([A-Za-z]\w*[A-Za-z0-9])_(?![\w`])")
# A parameter line of numpydoc's "Parameters" section: "*args, **kwargs" (optionally typed).
_QUOTED = re.compile(r'"[^"]*"')
_STAR_PARAMETERS = re.compile(r"^\s*\*{1,2}\w+(, \*{1,2}\w+)*\s*(:.*)?$")


def _escape_plain_text(line):
    parts = _LITERAL.split(line)
    for i in range(0, len(parts), 2):  # even parts are outside backticks
        part = _TRAILING_UNDERSCORE.sub(r"\1\\_", parts[i])
        # A glob in a quoted default, such as default="*weight", is not emphasis.
        parts[i] = _QUOTED.sub(lambda m: m.group(0).replace("*", "\\*"), part)
    line = "".join(parts)
    if _STAR_PARAMETERS.match(line):
        line = line.replace("*", "\\*")
    return line


def _escape_docstring(app, what, name, obj, options, lines):
    in_example = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith((">>>", "...")) or stripped.endswith("::"):
            in_example = True
            continue
        if in_example and stripped and not line.startswith((" ", "\t")):
            in_example = False
        if not in_example and not stripped.startswith(".. "):
            lines[i] = _escape_plain_text(line)


def setup(app):
    # Before numpydoc (priority 500) turns the sections into reST.
    app.connect("autodoc-process-docstring", _escape_docstring, priority=400)
