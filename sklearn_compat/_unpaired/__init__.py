"""Alignment without pairs, behind :class:`~sklearn_compat.UnpairedProcrustesAligner`.

- :mod:`.common`: the common form of rows, Procrustes, CSLS neighbours.
- :mod:`.start`: unsupervised starts (sorted similarity profiles, matched clusters).
- :mod:`.refine`: self-learning from a rough map to the map.
- :mod:`.confidence`: judging a map without any true pair.

Everything works on torch tensors of rows in the common form, on one device; the
estimator owns validation, sampling and the choice among candidates.
"""
