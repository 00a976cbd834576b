"""Quickstart: a new model's queries on an old model's gallery
===========================================================

Quickstart: make a new model's embeddings searchable against an old model's gallery.

Two small networks ("old" and "new") are trained on scikit-learn's bundled digits with
different seeds, so their embedding spaces differ.  A retrieval system indexed with the old
model cannot serve queries embedded by the new one, until an OrthogonalProcrustesAligner,
fitted on items embedded by both (the training split), maps new embeddings into the old
space.  We measure cross-model retrieval on the held-out split: each new-model query must
find the old-model embedding of the same item.

Runs in a few seconds on a CPU; no download.
"""

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer

from sklearn_compat import AffineAligner, LambdaOrthAligner, OrthogonalProcrustesAligner
from sklearn_compat.metrics import (
    cmc_topk_accuracy,
    mean_cosine_similarity,
    paired_topk_accuracy,
)


def train_embedder(X, y, seed, dim=32, epochs=20):
    """A small MLP classifier; its penultimate layer is the embedding."""
    torch.manual_seed(seed)
    body = torch.nn.Sequential(
        torch.nn.Linear(X.shape[1], 128), torch.nn.ReLU(), torch.nn.Linear(128, dim)
    )
    head = torch.nn.Linear(dim, int(y.max()) + 1)
    model = torch.nn.Sequential(body, torch.nn.ReLU(), head)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for batch in torch.randperm(len(X), generator=generator).split(128):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
            optimizer.step()

    def embed(Z):
        with torch.no_grad():
            return body(torch.from_numpy(Z)).numpy()

    return embed


def digit_models():
    """The digits split in train/test and two embedders trained with different seeds.

    Returns ``(X_train, X_test, y_train, y_test, old, new)``.
    """
    # Networks this small run fastest on one thread (more only add synchronisation).
    torch.set_num_threads(1)
    digits = load_digits()
    X = (digits.data / 16.0).astype(np.float32)
    X_train, X_test, y_train, y_test = train_test_split(
        X, digits.target, test_size=0.4, stratify=digits.target, random_state=0
    )
    old = train_embedder(X_train, y_train, seed=1)
    new = train_embedder(X_train, y_train, seed=2)
    return X_train, X_test, y_train, y_test, old, new


def main():
    X_train, X_test, y_train, y_test, old, new = digit_models()
    # The paired training items embedded by both models, and the held-out items.
    new_train, old_train = new(X_train), old(X_train)
    new_test, old_test = new(X_test), old(X_test)

    aligners = {
        "no alignment": None,
        # The defaults center="auto", scale="auto": chosen at fit (printed below).
        "Procrustes": OrthogonalProcrustesAligner(),
        "Procrustes(center, scale)": OrthogonalProcrustesAligner(center=True, scale=True),
        # Normalising only the new side changes its scale, and the centred map adds the
        # old model's mean back: fit the scale too, or the mean swamps every query.
        "Normalizer + Procrustes": make_pipeline(
            Normalizer(), OrthogonalProcrustesAligner(scale=True)
        ),
        "AffineAligner": AffineAligner(),
        "LambdaOrthAligner(lam=2)": LambdaOrthAligner(lam=2.0, random_state=0),
    }
    print(f"{len(X_test)} held-out digits; queries: new model, gallery: old model")
    print(f"{'map new -> old':30s} {'top-1':>7s} {'cosine':>7s} {'CMC@1':>7s}")
    results = {}
    for name, aligner in aligners.items():
        if aligner is None:
            queries = new_test
        else:
            queries = aligner.fit(new_train, old_train).transform(new_test)
        top1 = paired_topk_accuracy(queries, old_test, k=1)
        results[name] = top1
        cosine = mean_cosine_similarity(queries, old_test)
        cmc = cmc_topk_accuracy(queries, old_test, y_test)
        print(f"{name:30s} {top1:7.3f} {cosine:7.3f} {cmc:7.3f}")
    default = aligners["Procrustes"]
    scores = ", ".join(f"{k}: {v:.3f}" for k, v in (default.auto_scores_ or {}).items())
    print(
        f"the default Procrustes chose center_={default.center_}, "
        f"scale_mode_={default.scale_mode_!r} (held-out top-1 of each candidate: "
        f"{scores or 'none scored'})"
    )
    reference = cmc_topk_accuracy(old_test, old_test, y_test)
    print(f"{'old model alone (reference)':30s} {'':7s} {'':7s} {reference:7.3f}")
    print(
        "top-1: share of queries whose nearest old embedding (cosine) is their own image;\n"
        "cosine: mean cosine between a query and its own old embedding;\n"
        "CMC@1: share of queries whose nearest other old embedding shows the same digit."
    )
    return results


# %%
# Run
# ---
# Fits each map on the training digits and prints cross-model retrieval on the held-out
# digits, then the setting the default ``OrthogonalProcrustesAligner()`` chose.

if __name__ == "__main__":
    main()
