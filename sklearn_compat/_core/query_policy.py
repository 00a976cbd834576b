"""How :class:`~sklearn_compat.neighbors.AlignedNeighbors` ranks mapped queries.

Its ``gallery="auto"`` and ``csls_k="auto"`` settings are decided here from what the
aligner knows about its own map: whether it was fitted to centred rows, whether its
training criterion already demotes crowding targets, and, where the aligner measured it,
which comparison form won on its held-out fold (``query_scores_``, scored by
:func:`query_path_scores`).
"""

import numpy as np

from .holdout import top1_of_similarities, unit_rows_float32


def query_comparison_form(aligner, gallery):
    """How ``AlignedNeighbors`` compares mapped queries with the gallery.

    Returns ``(centered, unit_rows)``.  ``unit_rows``: the aligner maps into the space of
    Y's unit rows (both sides are scaled to unit length first).  ``centered``: both sides
    are shifted by the target mean before the cosine, which is right exactly when the map
    was fitted to centred rows (its queries then sit around Y's mean); the aligner's
    fitted ``center_`` says so where it has one, else its ``center`` or ``fit_intercept``
    parameter.  ``gallery="auto"`` centres only such maps; ``"centered"`` centres every
    map not fitted uncentred (the behaviour before ``"auto"``); ``"raw"`` never centres.
    """
    unit_rows = bool(getattr(aligner, "_maps_unit_rows", lambda: False)())
    if gallery == "raw":
        return False, unit_rows
    fitted = None
    for name in ("center_", "center", "fit_intercept"):
        value = getattr(aligner, name, None)
        if isinstance(value, (bool, np.bool_)):
            fitted = bool(value)
            break
    if gallery == "centered":
        return fitted is not False, unit_rows
    evidence = query_evidence(aligner)
    if evidence is not None:
        # The aligner measured the query path's forms on its held-out fold.
        return evidence[0], unit_rows
    hook = getattr(aligner, "_query_centred", None)
    if hook is not None:
        # The map says how its queries are compared (e.g. one trained for raw cosine).
        return bool(hook()), unit_rows
    return fitted is True, unit_rows


#: CSLS neighbourhood of the query path where the map does not say otherwise.
QUERY_CSLS_K = 10


def query_csls_k(aligner, csls_k):
    """The CSLS neighbourhood ``AlignedNeighbors`` ranks with (None: plain cosine).

    ``"auto"`` gives 10 (CSLS, Conneau et al. 2018), except for maps trained on a
    criterion that already demotes crowding targets (the aligner's ``_query_csls()``
    returns False: RCSLS's loss), on which the gallery's crowding over-corrects; those
    are ranked by the cosine that ``transform`` is trained for.  A number or None is
    kept as it is.
    """
    if not (isinstance(csls_k, str) and csls_k == "auto"):
        return csls_k
    evidence = query_evidence(aligner)
    if evidence is not None:
        return QUERY_CSLS_K if evidence[1] else None
    wants = getattr(aligner, "_query_csls", None)
    return QUERY_CSLS_K if wants is None or wants() else None


def fitted_csls_k(csls_k, n_reference):
    """``"auto"``'s CSLS neighbourhood on a reference of ``n_reference`` rows.

    The neighbourhood cannot hold more rows than the reference it is measured among (the
    gallery less the item itself, or the queries): a small reference lends all its rows,
    and one with no row leaves plain cosine (None).  An explicit ``csls_k`` is never
    changed: the searcher refuses one its data cannot serve.
    """
    if csls_k is None:
        return None
    return min(int(csls_k), int(n_reference)) if n_reference >= 1 else None


def query_path_scores(mapped, targets, *, center=None, unit_first=False, k=None):
    """Paired top-1 of a held-out fold ranked as :class:`~sklearn_compat.neighbors.
    AlignedNeighbors` would rank it, in each comparison form it can use.

    The fold's target rows stand in for the gallery.  ``"raw"``: the cosine of the mapped
    rows to the raw target rows (what ``transform`` is scored by); ``"centered"`` (only
    with ``center``, the map's target mean): both sides shifted by it first, after
    scaling to unit length where the map works on unit rows (``unit_first``); each with
    ``"+csls"``: ranked by ``2 cos - r(g)``, ``r(g)`` the mean cosine of target ``g`` to its
    ``k`` nearest other targets (CSLS, Conneau et al. 2018, with the gallery itself as the
    reference, as the query path without ``queries``).

    Returns
    -------
    dict
        ``{form: top-1}``; the CSLS forms are left out when the fold has ``k`` rows or
        fewer.
    """
    k = QUERY_CSLS_K if k is None else k
    mapped = np.asarray(mapped, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    forms = {"raw": (mapped, targets)}
    if center is not None:
        Z, G = mapped, targets
        if unit_first:
            Z, G = unit_rows_float32(mapped), unit_rows_float32(targets)
        forms["centered"] = (Z - center, G - center)
    out = {}
    for name, (Z, G) in forms.items():
        Z, G = unit_rows_float32(Z), unit_rows_float32(G)
        sims = Z @ G.T
        out[name] = top1_of_similarities(sims, targets)
        if G.shape[0] > k:
            among = G @ G.T
            np.fill_diagonal(among, -np.inf)
            crowding = np.partition(among, -k, axis=1)[:, -k:].mean(axis=1)
            out[name + "+csls"] = top1_of_similarities(2.0 * sims - crowding[None, :], targets)
    return out


#: Held-out top-1 by which another form of the query path must beat the default form
#: (CSLS in the form the map was fitted for) on the fold before the query path uses it.
QUERY_MARGIN = 0.005


def query_evidence(aligner):
    """``(centered, csls)`` that the aligner's held-out fold favours for the query path, or
    None where the aligner measured none (``query_scores_`` absent or None)."""
    scores = getattr(aligner, "query_scores_", None)
    if not isinstance(scores, dict) or not scores:
        return None
    default = "centered+csls" if "centered+csls" in scores else "raw+csls"
    if default not in scores:
        return None
    best = max(scores, key=scores.get)
    if scores[best] <= scores[default] + QUERY_MARGIN:
        best = default
    return best.startswith("centered"), best.endswith("+csls")
