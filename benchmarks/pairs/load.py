"""Tiny reader for the cached embedding pairs built by build_pairs.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_ROOT = HERE / "cache"


def load_pair(name: str, root=None) -> dict:
    """Return the arrays of ``<root>/<name>.npz`` as a dict, with ``meta`` decoded.

    Keys: X (new model, float32), Y (old model, float32), ids, split (bool, True =
    train row), meta (dict); some pairs add labels, label_names, texts, or (muse_en_fr)
    tgt_words, gold_rows, gallery, gallery_words.
    """
    root = Path(root) if root is not None else DEFAULT_ROOT
    path = root / f"{name}.npz"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing; build it with: python benchmarks/pairs/build_pairs.py "
            f"--only {name}" + ("" if root == DEFAULT_ROOT else f" --out {root}")
        )
    with np.load(path, allow_pickle=False) as z:
        d = {k: z[k] for k in z.files}
    d["meta"] = json.loads(str(d["meta"]))
    return d


def available(root=None) -> list[str]:
    root = Path(root) if root is not None else DEFAULT_ROOT
    return sorted(p.stem for p in root.glob("*.npz"))
