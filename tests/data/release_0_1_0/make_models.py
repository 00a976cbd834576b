"""Write the model files that ``tests/test_persistence.py`` loads to prove compatibility.

Run once with the release named by the folder (0.1.0), before any change of layout, so the
files carry that release's module paths::

    python tests/data/release_0_1_0/make_models.py

Each estimator is fitted on small seeded data and saved with skops; ``expected.npz`` holds the
inputs and every model's ``transform`` output at save time.
"""

from pathlib import Path

import numpy as np
import skops.io

import sklearn_compat
from sklearn_compat import (
    AffineAligner,
    LambdaOrthAligner,
    LambdaOrthAlignerCV,
    OrthogonalProcrustesAligner,
    RelativeAnchorEncoder,
)

HERE = Path(__file__).resolve().parent


def main():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 6)) + 2.0
    Y = X @ np.linalg.qr(rng.normal(size=(6, 6)))[0][:, :5] + 0.1 * rng.normal(size=(80, 5))
    X, Y = X.astype(np.float32), Y.astype(np.float32)
    models = {
        "procrustes": OrthogonalProcrustesAligner(),
        "procrustes_centered": OrthogonalProcrustesAligner(center=True, scale=True),
        "affine": AffineAligner(alpha=0.1),
        "lambda_orth": LambdaOrthAligner(lam=1.0, max_epochs=5, random_state=0),
        "lambda_orth_cv": LambdaOrthAlignerCV(
            lams=[0.0, 1.0], estimator=LambdaOrthAligner(max_epochs=3, random_state=0), cv=2
        ),
        "relative": RelativeAnchorEncoder(n_anchors=10, random_state=0),
    }
    expected = {"X": X, "Y": Y}
    for name, model in models.items():
        if name == "relative":
            model.fit(X)
        else:
            model.fit(X, Y)
        expected[name] = model.transform(X)
        skops.io.dump(model, HERE / f"{name}.skops")
    np.savez(HERE / "expected.npz", **expected)
    print(f"wrote {len(models)} models with sklearn_compat {sklearn_compat.__version__}")


if __name__ == "__main__":
    main()
