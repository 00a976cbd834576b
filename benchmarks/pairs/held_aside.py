"""The seeds of the held-aside pairs, in a module of their own.

``build_heldout_pairs.py`` draws its gloss samples with these seeds, and
``build_pairs.py`` keeps every one of those glosses out of its design pairs; both import
the seeds from here, so neither imports the other (no import circle).
"""

#: The seeds of the heldout_, heldout_b_, heldout_c_ and heldout_d_ pairs.
SEED = 11
SEED_B = 23
SEED_C = 37
SEED_D = 53
SEEDS = (SEED, SEED_B, SEED_C, SEED_D)

#: Glosses drawn with each seed (``heldout_d_gloss_e5_minilm`` has 6,000: 4,800 training
#: items, 2,400 disjoint rows a side).
N_GLOSSES = {SEED: 5000, SEED_B: 5000, SEED_C: 5000, SEED_D: 6000}

#: Seeds whose sample is drawn only from glosses that no earlier pair holds: none of the
#: earlier seeds' samples and none of the 6,000-gloss design sample (``wn_gloss_e5_minilm``,
#: ``wn_gloss_e5_wordllama``: build_pairs' seed 0).  ``wn_gloss16k_e5_minilm`` excludes
#: every held-aside gloss itself, so it shares none with these either.
DISJOINT_SEEDS = frozenset({SEED_D})

#: The design sample those seeds avoid: (glosses, seed) of ``wn_gloss_e5_minilm``.
DESIGN_GLOSS_SAMPLE = (6000, 0)
