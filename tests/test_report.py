"""compatibility_report against brute-force numpy references on small data."""

import json

import numpy as np
import pytest

from sklearn_compat import AffineAligner, OrthogonalProcrustesAligner
from sklearn_compat.metrics import (
    backfilling_curve,
    compatibility_report,
    mean_average_precision,
)

from _helpers import unit


def _sims(Q, G):
    return unit(np.asarray(Q, np.float64)) @ unit(np.asarray(G, np.float64)).T


def _topk_sets(S, k, exclude_self):
    S = S.copy()
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    return [set(np.argsort(-row, kind="stable")[:k]) for row in S]


def _agreement(S, S_ref, k, exclude_self):
    a, b = _topk_sets(S, k, exclude_self), _topk_sets(S_ref, k, exclude_self)
    return np.mean([len(x & y) / k for x, y in zip(a, b, strict=True)])


def _cmc(S, q_labels, g_labels, k, exclude_self):
    S = S.copy()
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    hits = []
    for i, row in enumerate(S):
        relevant = g_labels == q_labels[i]
        if exclude_self:
            relevant[i] = False
        if relevant.any():
            best = row[relevant].max()
            hits.append(((row >= best) & ~relevant).sum() < k)
    return np.mean(hits)


@pytest.fixture
def upgrade(rng):
    """Old space, a new model = noisy linear image of it, labels, a train/test split."""
    n, d_old, d_new = 160, 6, 7
    labels = rng.integers(0, 4, size=n)
    centres = rng.normal(size=(4, d_old)) * 2
    old = centres[labels] + rng.normal(size=(n, d_old)) + 1.5
    new = old @ rng.normal(size=(d_old, d_new)) + 0.5 * rng.normal(size=(n, d_new))
    aligner = AffineAligner().fit(new[:100], old[:100])
    return aligner, new[100:], old[100:], labels[100:]


def test_item_mode_against_brute_force(upgrade):
    aligner, new, old, labels = upgrade
    report = compatibility_report(
        aligner, new, old, labels=labels, k=(1, 5), n_bootstrap=200, random_state=0
    )
    mapped = aligner.transform(new)
    mean = old.mean(axis=0)
    centred_gallery = unit(old - mean)
    sims = {
        "old": _sims(old, old),
        "bridge": _sims(mapped, old),
        "bridge_centred": _sims(mapped - mean, centred_gallery),
        "reindex": _sims(new, new),
    }
    for system, S in sims.items():
        got = report.metrics[system]
        for k in (1, 5):
            assert got[f"cmc@{k}"] == pytest.approx(_cmc(S, labels, labels, k, True))
            assert got[f"agreement@{k}"] == pytest.approx(_agreement(S, sims["reindex"], k, True))
    assert report.metrics["bridge"]["mAP"] == pytest.approx(
        mean_average_precision(mapped, old, labels)
    )
    assert report.metrics["reindex"]["agreement@5"] == 1.0
    # retention and its interval
    est, low, high = report.retention["bridge"]["cmc@5"]
    assert est == pytest.approx(
        report.metrics["bridge"]["cmc@5"] / report.metrics["reindex"]["cmc@5"]
    )
    assert low <= est <= high
    assert report.primary == "cmc@5"
    low_centred = report.retention["bridge_centred"]["cmc@5"][1]
    if low >= 0.95:
        assert report.decision.startswith("bridge: it keeps")
    elif low_centred >= 0.95:
        assert report.decision.startswith("bridge with the gallery centred by its mean")
    else:
        assert report.decision.startswith("re-index:")
    # backfilling: the library's curve with mapped new items replacing old ones
    betas, values = backfilling_curve(mapped, old, None, labels, metric="cmc_top5")
    np.testing.assert_allclose(report.backfill["values"], values)
    assert report.backfill["betas"] == pytest.approx(betas.tolist())


def test_query_mode_recall_against_brute_force(rng):
    n, d = 80, 5
    old = rng.normal(size=(n, d))
    new = old @ np.linalg.qr(rng.normal(size=(d, d)))[0]
    q_old = old[:30] + 0.4 * rng.normal(size=(30, d))
    q_new = q_old @ np.linalg.qr(rng.normal(size=(d, d)))[0]  # an unrelated rotation
    targets = np.arange(30)
    aligner = OrthogonalProcrustesAligner().fit(new, old)
    report = compatibility_report(
        aligner, new, old, queries=(q_new, q_old), query_targets=targets, k=3, random_state=0
    )
    S = _sims(aligner.transform(q_new), old)
    own = S[np.arange(30), targets]
    expected = np.mean((S >= own[:, None]).sum(axis=1) - 1 < 3)
    assert report.metrics["bridge"]["recall@3"] == pytest.approx(expected)
    S_old = _sims(q_old, old)
    own_old = S_old[np.arange(30), targets]
    assert report.metrics["old"]["recall@3"] == pytest.approx(
        np.mean((S_old >= own_old[:, None]).sum(axis=1) - 1 < 3)
    )
    assert report.primary == "recall@3"
    assert report.backfill is None


def test_perfect_bridge_and_broken_bridge_decisions(rng):
    old = rng.normal(size=(120, 6))
    Q = np.linalg.qr(rng.normal(size=(6, 6)))[0]
    new = old @ Q
    good = OrthogonalProcrustesAligner(center=False).fit(new, old)
    report = compatibility_report(good, new, old, k=5, random_state=0)
    assert report.retention["bridge"]["agreement@5"] == pytest.approx((1.0, 1.0, 1.0))
    assert report.decision == "bridge: it keeps 100% [100-100%] of re-index agreement@5"
    bad = OrthogonalProcrustesAligner(center=False).fit(new, rng.permutation(old))
    report = compatibility_report(bad, new, old, k=5, random_state=0)
    assert report.decision.startswith("re-index: the bridge keeps only")
    old_share = f"{100 * report.metrics['old']['agreement@5']:.0f}%"
    assert report.decision.endswith(f"(needs 95%; the old system itself: {old_share})")


def test_renderings(upgrade, tmp_path):
    aligner, new, old, labels = upgrade
    report = compatibility_report(aligner, new, old, labels=labels, n_bootstrap=50, random_state=0)
    data = json.loads(report.to_json())
    assert data["decision"] == report.decision and data["primary"] == "cmc@10"
    text = str(report)
    assert report.decision in text and "bridge, centred gallery: no re-embedding" in text
    md = report.to_markdown(figure="report.png")
    assert md.startswith("# Bridge or re-index?") and "![bridge or re-index](report.png)" in md
    path = report.plot(tmp_path / "report.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input(upgrade):
    aligner, new, old, labels = upgrade
    with pytest.raises(ValueError, match="same number of rows"):
        compatibility_report(aligner, new, old[:-1])
    with pytest.raises(ValueError, match="k=60 exceeds the 59 gallery items"):
        compatibility_report(aligner, new, old, k=60)
    with pytest.raises(ValueError, match="labels has 3 entries but Y_old has 60 rows"):
        compatibility_report(aligner, new, old, labels=labels[:3])
    with pytest.raises(ValueError, match="queries must be a pair"):
        compatibility_report(aligner, new, old, queries=new)
    with pytest.raises(ValueError, match="pass query_targets"):
        compatibility_report(aligner, new, old, queries=(new[:5], old[:5]))
    with pytest.raises(ValueError, match="maps into 6 features but Y_old has 5"):
        compatibility_report(aligner, new, old[:, :5])


def test_the_report_names_the_pairs_it_was_measured_on(upgrade):
    aligner, new, old, _ = upgrade
    options = {"n_bootstrap": 20, "random_state": 0}
    held_out = compatibility_report(aligner, new, old, **options)
    assert "60 queries against 60 held-out gallery items" in held_out.to_markdown()
    # The aligner's own training pairs are not called held-out.
    own = compatibility_report(aligner, new, old, **options, evaluated_on="training")
    md = own.to_markdown()
    assert "held-out gallery items" not in md
    assert "60 gallery items from the aligner's training pairs" in md
    assert "training figure" in str(own) and own.to_dict()["evaluated_on"] == "training"
    unknown = compatibility_report(aligner, new, old, **options, evaluated_on="unknown")
    assert "60 queries against 60 gallery items;" in unknown.to_markdown()
    with pytest.raises(ValueError, match="evaluated_on must be one of"):
        compatibility_report(aligner, new, old, evaluated_on="train")
