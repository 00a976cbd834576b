"""The seeds of the held-aside pairs, in a module of their own.

``build_heldout_pairs.py`` draws its 5,000-gloss samples with these seeds, and
``build_pairs.py`` keeps every one of those glosses out of its design pairs; both import
the seeds from here, so neither imports the other (no import circle).
"""

#: The seeds of the heldout_, heldout_b_ and heldout_c_ pairs.
SEED = 11
SEED_B = 23
SEED_C = 37
SEEDS = (SEED, SEED_B, SEED_C)
