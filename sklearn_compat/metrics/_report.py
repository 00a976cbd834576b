"""The bridge-or-reindex report: after a model upgrade, is mapping the queries enough?

Three systems a user chooses between, compared on held-out items:

- **old**: old-model queries against the old gallery (today's system);
- **bridge**: new-model queries mapped by the aligner against the old gallery (no
  re-indexing); also with the gallery and mapped queries centred by the old gallery's
  mean and renormalised ("bridge, centred gallery"), which needs no re-embedding either
  and helps anisotropic old models;
- **re-index**: new-model queries against the new gallery (the cost the bridge avoids).

Retention is bridge / re-index, with paired bootstrap confidence intervals over queries.
The report adds the Gram-matrix alignability diagnostic of Maystre et al. (2025) and the
partial-backfilling curve of Ricci et al. (NeurIPS 2025); see docs/methods.md.
"""

import json
from dataclasses import dataclass, field

import numpy as np
from sklearn.utils import check_random_state

from .._core.backend import as_numpy_input
from .._core.ranking import label_rank_stats, target_ranks, topk_indices, unit_rows
from .._core.validation import (
    check_embeddings,
    check_positive_int,
    check_same_rows,
    encode_labels,
)
from ._alignability import alignability
from ._backfill import backfilling_curve, backfilling_order

__all__ = ["CompatibilityReport", "compatibility_report"]

SYSTEMS = ("old", "bridge", "bridge_centred", "reindex")
SYSTEM_NAMES = {
    "old": "old (old queries, old gallery)",
    "bridge": "bridge (mapped new queries, old gallery)",
    "bridge_centred": "bridge, centred gallery: no re-embedding",
    "reindex": "re-index (new queries, new gallery)",
}
# What the report says of the pairs it was measured on (``evaluated_on``).
EVALUATED_ON = {
    "held-out": "held-out gallery items",
    "training": "gallery items from the aligner's training pairs",
    "unknown": "gallery items",
}
# Bootstrap replicates drawn at once (each a multinomial count per query).
_BOOTSTRAP_CHUNK = 64


@dataclass
class CompatibilityReport:
    """What :func:`compatibility_report` found; render with ``str``, ``to_markdown``,
    ``to_dict`` / ``to_json`` or ``plot``.

    Attributes
    ----------
    metrics : dict
        ``{system: {metric: value}}`` for the systems ``"old"``, ``"bridge"``,
        ``"bridge_centred"`` and ``"reindex"``; metrics ``recall@k`` (with queries),
        ``cmc@k`` and ``mAP`` (with labels) and ``agreement@k`` (share of the re-index's
        top-k that the system returns).
    retention : dict
        ``{system: {metric: (estimate, low, high)}}``: the system's value over the
        re-index's, with a bootstrap confidence interval, for the two bridges.
    primary : str
        The metric the decision is made on.
    decision : str
        One line: bridge or re-index, and why.
    alignability : dict
        :func:`~sklearn_compat.metrics.alignability` of the evaluated pairs.
    backfill : dict or None
        ``betas``, ``values``, ``metric`` and ``first_items`` (gallery rows to re-embed
        first) of the backfilling curve (needs labels).
    """

    metrics: dict
    retention: dict
    primary: str
    decision: str
    alignability: dict
    backfill: dict | None
    n_queries: int
    n_gallery: int
    confidence: float
    min_retention: float
    notes: list = field(default_factory=list)
    evaluated_on: str = "held-out"

    def to_dict(self):
        """Plain builtins (JSON-ready)."""
        return {
            "decision": self.decision,
            "primary": self.primary,
            "metrics": self.metrics,
            "retention": {
                s: {m: list(v) for m, v in per.items()} for s, per in self.retention.items()
            },
            "alignability": self.alignability,
            "backfill": self.backfill,
            "n_queries": self.n_queries,
            "n_gallery": self.n_gallery,
            "confidence": self.confidence,
            "min_retention": self.min_retention,
            "notes": list(self.notes),
            "evaluated_on": self.evaluated_on,
        }

    def to_json(self, **kwargs):
        """The report as a JSON string (``kwargs`` go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), **kwargs)

    def _metric_names(self):
        return list(self.metrics["reindex"])

    def __str__(self):
        names = self._metric_names()
        width = max(len(n) for n in SYSTEM_NAMES.values())
        lines = [self.decision, ""]
        lines.append(" " * width + "".join(f"{n:>14}" for n in names))
        for system in SYSTEMS:
            values = self.metrics[system]
            lines.append(
                f"{SYSTEM_NAMES[system]:<{width}}" + "".join(f"{values[n]:>14.4f}" for n in names)
            )
        lines.append("")
        level = f"{self.confidence:.0%}"
        for system in ("bridge", "bridge_centred"):
            parts = [f"{m} {_interval(*value)}" for m, value in self.retention[system].items()]
            lines.append(f"retention of {system} ({level} CI): " + ", ".join(parts))
        a = self.alignability
        lines.append(
            f"alignability: delta {a['delta']:.4f}, Procrustes residual per item "
            f"{a['mean_sq_error']:.4f} (bound {a['mean_sq_error_bound']:.4f})"
        )
        if self.backfill is not None:
            points = ", ".join(
                f"{b:.0%}: {v:.3f}"
                for b, v in zip(self.backfill["betas"], self.backfill["values"], strict=True)
            )
            lines.append(f"backfilling ({self.backfill['metric']} by share re-embedded): {points}")
        lines.extend(self.notes)
        return "\n".join(lines)

    def to_markdown(self, figure=None):
        """The report as Markdown; ``figure`` (a path or URL) is linked as an image."""
        names = self._metric_names()
        out = ["# Bridge or re-index?", "", f"**{self.decision}**", ""]
        out.append(
            f"{self.n_queries} queries against {self.n_gallery} "
            f"{EVALUATED_ON[self.evaluated_on]}; "
            f"confidence intervals: {self.confidence:.0%} bootstrap over queries."
        )
        out += ["", "| system | " + " | ".join(names) + " |"]
        out.append("|---" * (len(names) + 1) + "|")
        for system in SYSTEMS:
            values = self.metrics[system]
            out.append(
                f"| {SYSTEM_NAMES[system]} | "
                + " | ".join(f"{values[n]:.4f}" for n in names)
                + " |"
            )
        out += ["", "## Retention (share of the re-index's value)", ""]
        out.append("| system | " + " | ".join(self.retention["bridge"]) + " |")
        out.append("|---" * (len(self.retention["bridge"]) + 1) + "|")
        for system in ("bridge", "bridge_centred"):
            cells = [_interval(*value) for value in self.retention[system].values()]
            out.append(f"| {SYSTEM_NAMES[system]} | " + " | ".join(cells) + " |")
        a = self.alignability
        out += [
            "",
            "## Alignability (Gram-matrix diagnostic)",
            "",
            f"- delta (RMS difference of cosines between the two models): {a['delta']:.4f}",
            f"- best orthogonal map, mean squared residual per item: {a['mean_sq_error']:.4f}"
            f" (bound from delta: {a['mean_sq_error_bound']:.4f})",
        ]
        if self.backfill is not None:
            out += ["", f"## Backfilling ({self.backfill['metric']})", ""]
            out.append(
                "| re-embedded share | "
                + " | ".join(f"{b:.0%}" for b in self.backfill["betas"])
                + " |"
            )
            out.append("|---" * (len(self.backfill["betas"]) + 1) + "|")
            out.append(
                "| value | " + " | ".join(f"{v:.3f}" for v in self.backfill["values"]) + " |"
            )
            out += [
                "",
                "Re-embed first (gallery rows, farthest from their class first): "
                + ", ".join(str(i) for i in self.backfill["first_items"]),
            ]
        if self.notes:
            out += [""] + [f"- {note}" for note in self.notes]
        if figure is not None:
            out += ["", f"![bridge or re-index]({figure})"]
        return "\n".join(out) + "\n"

    def plot(self, path):
        """Write the figure (PNG): the metrics per system and the backfilling curve."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = self._metric_names()
        panels = 2 if self.backfill is not None else 1
        fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4), squeeze=False)
        ax = axes[0, 0]
        width = 0.8 / len(SYSTEMS)
        positions = np.arange(len(names))
        for i, system in enumerate(SYSTEMS):
            values = [self.metrics[system][n] for n in names]
            ax.bar(positions + i * width, values, width, label=SYSTEM_NAMES[system])
        ax.set_xticks(positions + width * (len(SYSTEMS) - 1) / 2, names)
        ax.set_ylim(0, 1.05)
        ax.set_title(self.decision, fontsize=8, wrap=True)
        ax.legend(fontsize=7, loc="lower left")
        if self.backfill is not None:
            ax = axes[0, 1]
            ax.plot(self.backfill["betas"], self.backfill["values"], marker="o", label="bridge")
            ax.axhline(
                self.metrics["reindex"].get(self.backfill["cmc_name"], np.nan),
                ls="--",
                c="k",
                label="re-index",
            )
            ax.set_xlabel("share of the gallery re-embedded")
            ax.set_ylabel(self.backfill["metric"])
            ax.set_ylim(0, 1.05)
            ax.legend(fontsize=7)
            ax.set_title("backfilling", fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=100, format="png")
        plt.close(fig)
        return path


def _pct(value):
    return "n/a" if not np.isfinite(value) else f"{100 * value:.0f}%"


def _interval(estimate, low, high):
    """``97% [95-98%]``."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return f"{_pct(estimate)} [n/a]"
    return f"{_pct(estimate)} [{100 * low:.0f}-{100 * high:.0f}%]"


def _check_ks(k):
    ks = (k,) if np.isscalar(k) else tuple(k)
    if not ks:
        raise ValueError("k must be a positive integer or a non-empty sequence of them.")
    return tuple(sorted({check_positive_int(v, "k") for v in ks}))


def centred_bridge(mapped_queries, old_gallery):
    """Queries and gallery centred by the old gallery's mean, the gallery renormalised.

    The query path of an anisotropic old model with no re-embedding: every old vector
    (already in the index) is shifted by one mean vector, and so are the mapped queries.
    """
    gallery = old_gallery.astype(np.float64)
    mean = gallery.mean(axis=0)
    gallery = unit_rows(gallery - mean)
    return mapped_queries.astype(np.float64) - mean, gallery


def compatibility_report(
    aligner,
    X_new,
    Y_old,
    *,
    queries=None,
    query_targets=None,
    labels=None,
    k=(1, 10),
    n_bootstrap=1000,
    confidence=0.95,
    min_retention=0.95,
    backfill_steps=10,
    random_state=None,
    device="auto",
    memory_budget=None,
    evaluated_on="held-out",
):
    """Bridge or re-index: compare the old, bridged and re-indexed systems on held-out items.

    Parameters
    ----------
    aligner : fitted aligner
        Maps new-model embeddings into the old model's space (``transform``).
    X_new : array-like of shape (n_gallery, d_new)
        Held-out gallery items embedded by the new model (rows not used to fit).
    Y_old : array-like of shape (n_gallery, d_old)
        The same items, row for row, embedded by the old model.
    queries : tuple (Q_new, Q_old) or None, default=None
        Query embeddings by the new and the old model (same queries, row for row).  None:
        the gallery items are the queries (item-to-item retrieval), each excluded from
        its own gallery.
    query_targets : array-like of shape (n_queries,), default=None
        The gallery row relevant to each query, for ``recall@k``.  None with ``queries``:
        query ``i`` is relevant to gallery row ``i``.
    labels : array-like of shape (n_gallery,), default=None
        Class of each gallery item: adds CMC top-k and mAP and the backfilling curve.
        With ``queries``, a query's class is its target's.
    k : int or sequence of int, default=(1, 10)
        Cut-offs of recall, CMC and agreement.  The decision uses the largest.
    n_bootstrap : int, default=1000
        Bootstrap replicates (queries resampled, all systems together) for the intervals.
    confidence : float, default=0.95
        Level of the percentile intervals.
    min_retention : float, default=0.95
        The bridge is recommended when the lower bound of its retention of the decision
        metric is at least this (the plain bridge, else the centred one when that clears
        the bar; the line says which).
    backfill_steps : int, default=10
        Points of the backfilling curve minus one.
    random_state : int, RandomState instance or None, default=None
        Seeds the bootstrap.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
        Where the rankings run.
    memory_budget : int, default=None
        Bytes of similarity block held at once (None: 128 MiB).
    evaluated_on : {"held-out", "training", "unknown"}, default="held-out"
        What the pairs ``(X_new, Y_old)`` are, as the report states it: items the aligner
        was not fitted on (the meaningful case), the aligner's own training pairs (every
        figure is then a training figure, and the report says so), or not known.

    Returns
    -------
    CompatibilityReport

    Notes
    -----
    The decision metric is ``recall@K`` with queries, else ``cmc@K`` with labels, else
    ``agreement@K`` (the share of the re-indexed system's top ``K`` results that the
    bridge returns), ``K = max(k)``.  Agreement needs no ground truth, so it is always
    reported.  Retention is the ratio of means over the same queries; its interval comes
    from resampling the queries (paired: each replicate scores both systems on one
    sample).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat import OrthogonalProcrustesAligner
    >>> from sklearn_compat.metrics import compatibility_report
    >>> rng = np.random.default_rng(0)
    >>> old = rng.normal(size=(300, 8))
    >>> new = old @ np.linalg.qr(rng.normal(size=(8, 8)))[0]  # the upgrade: a rotation
    >>> aligner = OrthogonalProcrustesAligner().fit(new[:200], old[:200])
    >>> report = compatibility_report(aligner, new[200:], old[200:], random_state=0)
    >>> report.decision
    'bridge: it keeps 100% [100-100%] of re-index agreement@10'
    """
    # The aligner maps the inputs as given, so a model fitted on named columns gets them.
    X_given = X_new
    X_new = check_embeddings(X_new, "X_new")
    Y_old = check_embeddings(Y_old, "Y_old")
    check_same_rows(X_new, Y_old, ("X_new", "Y_old"))
    ks = _check_ks(k)
    n_bootstrap = check_positive_int(n_bootstrap, "n_bootstrap")
    backfill_steps = check_positive_int(backfill_steps, "backfill_steps")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}.")
    if evaluated_on not in EVALUATED_ON:
        raise ValueError(
            f"evaluated_on must be one of {sorted(EVALUATED_ON)}, got {evaluated_on!r}."
        )
    n_gallery = X_new.shape[0]
    item_mode = queries is None
    if item_mode:
        if query_targets is not None:
            raise ValueError("query_targets needs queries=(Q_new, Q_old).")
        Q_new, Q_old, targets = X_new, Y_old, None
    else:
        if not isinstance(queries, (tuple, list)) or len(queries) != 2:
            raise ValueError("queries must be a pair (Q_new, Q_old) of query embeddings.")
        Q_new = check_embeddings(queries[0], "queries[0] (Q_new)")
        Q_old = check_embeddings(queries[1], "queries[1] (Q_old)")
        check_same_rows(Q_new, Q_old, ("Q_new", "Q_old"))
        for Q, G, name in ((Q_new, X_new, "Q_new"), (Q_old, Y_old, "Q_old")):
            if Q.shape[1] != G.shape[1]:
                raise ValueError(
                    f"{name} has {Q.shape[1]} features but its gallery has {G.shape[1]}."
                )
        targets = _check_targets(query_targets, Q_new.shape[0], n_gallery)
    n_queries = Q_new.shape[0]
    limit = n_gallery - 1 if item_mode else n_gallery
    if ks[-1] > limit:
        raise ValueError(f"k={ks[-1]} exceeds the {limit} gallery items a query can retrieve.")

    mapped = np.asarray(aligner.transform(X_given if item_mode else queries[0]))
    if mapped.shape[1] != Y_old.shape[1]:
        raise ValueError(
            f"the aligner maps into {mapped.shape[1]} features but Y_old has "
            f"{Y_old.shape[1]}: it must map the new model's space into the old one's."
        )
    systems = {
        "old": (Q_old, Y_old),
        "bridge": (mapped, Y_old),
        "bridge_centred": centred_bridge(mapped, Y_old),
        "reindex": (Q_new, X_new),
    }
    opts = {"device": device, "budget": memory_budget}

    per_query = {s: {} for s in SYSTEMS}  # per-query values whose means are the metrics
    if targets is not None:
        for s, (Q, G) in systems.items():
            ranks = target_ranks(Q, G, targets, **opts)
            for kk in ks:
                per_query[s][f"recall@{kk}"] = (ranks < kk).astype(np.float64)
    codes = None
    if labels is not None:
        (codes,) = encode_labels(labels, names=["labels"])
        if len(codes) != n_gallery:
            raise ValueError(f"labels has {len(codes)} entries but Y_old has {n_gallery} rows.")
        query_codes = codes if item_mode else codes[targets]
        for s, (Q, G) in systems.items():
            stats = {
                want: label_rank_stats(
                    Q,
                    G,
                    query_codes,
                    codes,
                    exclude_self=item_mode,
                    want=want,
                    device=device,
                    budget=memory_budget,
                )
                for want in ("rank", "ap")
            }
            valid = stats["rank"] >= 0
            if not valid.any():
                raise ValueError("No query has a relevant item (same class) in the gallery.")
            for kk in ks:
                per_query[s][f"cmc@{kk}"] = ((stats["rank"] < kk) & valid)[valid].astype(float)
            per_query[s]["mAP"] = stats["ap"][valid]
    neighbours = {
        s: topk_indices(Q, G, ks, exclude_self=item_mode, **opts) for s, (Q, G) in systems.items()
    }
    for s in SYSTEMS:
        for kk in ks:
            per_query[s][f"agreement@{kk}"] = _overlap(
                neighbours[s][kk], neighbours["reindex"][kk]
            )

    metrics = {s: {m: float(np.mean(v)) for m, v in per_query[s].items()} for s in SYSTEMS}
    retention = _bootstrap_retention(
        per_query, n_bootstrap, confidence, check_random_state(random_state)
    )
    K = ks[-1]
    primary = (
        f"recall@{K}"
        if targets is not None
        else f"cmc@{K}"
        if codes is not None
        else f"agreement@{K}"
    )
    old_value = metrics["old"][primary] if primary.startswith("agreement") else None
    decision = _decision(retention, primary, min_retention, old_value)

    backfill = None
    if codes is not None:
        metric = f"cmc_top{K}"
        curve_kwargs = {} if item_mode else {"query_labels": codes[targets]}
        betas, values = backfilling_curve(
            mapped if item_mode else aligner.transform(X_given),
            Y_old,
            None if item_mode else mapped,
            codes,
            n_steps=backfill_steps,
            metric=metric,
            device=device,
            memory_budget=memory_budget,
            **curve_kwargs,
        )
        order = backfilling_order(Y_old, codes)
        backfill = {
            "metric": metric,
            "cmc_name": f"cmc@{K}",
            "betas": betas.tolist(),
            "values": values.tolist(),
            "first_items": order[:10].tolist(),
        }
    diag = alignability(X_new, Y_old, device=device)
    notes = []
    if evaluated_on == "training":
        notes.append(
            "These are the training pairs the aligner was fitted on, not held-out items: "
            "every figure here is a training figure, optimistic for unseen items."
        )
    centred, plain = retention["bridge_centred"][primary][0], retention["bridge"][primary][0]
    if centred > plain + 0.02:
        notes.append(
            f"Centring the old gallery by its mean (no re-embedding) raises the bridge's "
            f"{primary} retention from {_pct(plain)} to {_pct(centred)}: serve the bridge "
            "with the centred gallery."
        )
    return CompatibilityReport(
        metrics=metrics,
        retention=retention,
        primary=primary,
        decision=decision,
        alignability={k_: (v if isinstance(v, int) else float(v)) for k_, v in diag.items()},
        backfill=backfill,
        n_queries=int(n_queries),
        n_gallery=int(n_gallery),
        confidence=float(confidence),
        min_retention=float(min_retention),
        notes=notes,
        evaluated_on=evaluated_on,
    )


def _check_targets(query_targets, n_queries, n_gallery):
    if query_targets is None:
        if n_queries != n_gallery:
            raise ValueError(
                f"{n_queries} queries but {n_gallery} gallery items: pass query_targets, "
                "the gallery row relevant to each query."
            )
        return np.arange(n_queries)
    targets = np.asarray(as_numpy_input(query_targets))
    if targets.shape != (n_queries,) or targets.dtype.kind not in "iu":
        raise ValueError(f"query_targets must be {n_queries} integer gallery row indices.")
    if targets.min() < 0 or targets.max() >= n_gallery:
        raise ValueError(f"query_targets must lie in [0, {n_gallery}).")
    return targets.astype(np.int64)


def _overlap(found, reference):
    """Per row, the share of ``reference``'s items that ``found`` holds (same width)."""
    n, k = reference.shape
    shared = np.empty(n)
    # Row blocks keep the (rows, k, k) comparison near 16 MB whatever n and k.
    step = max(1, (1 << 24) // (k * k))
    for start in range(0, n, step):
        f, r = found[start : start + step], reference[start : start + step]
        shared[start : start + step] = (f[:, :, None] == r[:, None, :]).any(axis=2).sum(axis=1)
    return shared / k


def _bootstrap_retention(per_query, n_bootstrap, confidence, rng):
    """``{system: {metric: (estimate, low, high)}}`` for the two bridges over re-index."""
    metric_names = list(per_query["reindex"])
    columns = [(s, m) for s in ("bridge", "bridge_centred", "reindex") for m in metric_names]
    ratios = {(s, m): [] for s in ("bridge", "bridge_centred") for m in metric_names}
    # Metrics over different query sets (valid ones for label metrics) get their own counts.
    groups = {}
    for s, m in columns:
        groups.setdefault(len(per_query[s][m]), []).append((s, m))
    for n, group in groups.items():
        V = np.column_stack([per_query[s][m] for s, m in group])
        index = {key: j for j, key in enumerate(group)}
        sums = []
        # Replicates per draw: at most 64, and at most about 4M counts held at once.
        chunk = max(1, min(_BOOTSTRAP_CHUNK, (1 << 22) // n))
        for start in range(0, n_bootstrap, chunk):
            size = min(chunk, n_bootstrap - start)
            counts = rng.multinomial(n, np.full(n, 1.0 / n), size=size)
            sums.append(counts @ V)
        sums = np.vstack(sums)
        for s, m in group:
            if s == "reindex":
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios[(s, m)] = sums[:, index[(s, m)]] / sums[:, index[("reindex", m)]]
    tail = (1 - confidence) / 2
    out = {"bridge": {}, "bridge_centred": {}}
    for (s, m), values in ratios.items():
        reference = np.mean(per_query["reindex"][m])
        estimate = np.mean(per_query[s][m]) / reference if reference > 0 else np.nan
        finite = values[np.isfinite(values)]
        low, high = np.quantile(finite, [tail, 1 - tail]) if len(finite) else (np.nan, np.nan)
        out[s][m] = (float(estimate), float(low), float(high))
    return out


def _decision(retention, primary, min_retention, old_value=None):
    """The one-line verdict: the better bridge (by its lower bound) if it clears the bar."""

    def lower(system):
        low = retention[system][primary][1]
        return low if np.isfinite(low) else -np.inf

    best = max(("bridge", "bridge_centred"), key=lower)  # ties: the plain bridge
    keeps = f"{_interval(*retention[best][primary])} of re-index {primary}"
    if lower(best) >= min_retention:
        how = "bridge" if best == "bridge" else "bridge with the gallery centred by its mean"
        return f"{how}: it keeps {keeps}"
    context = f"needs {_pct(min_retention)}"
    if old_value is not None:
        # Two models share only part of their neighbourhoods: today's system for scale.
        context += f"; the old system itself: {_pct(old_value)}"
    keeps = f"{_interval(*retention['bridge'][primary])} of re-index {primary}"
    return f"re-index: the bridge keeps only {keeps} ({context})"
