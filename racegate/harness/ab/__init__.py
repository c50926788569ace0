"""A/B mode: a reference and a candidate environment run interleaved on one machine, compared.

Its modules, in the order they build on each other: stats (a run's sample; each metric's ratio,
interval and call; the power of pooled runs), result (one comparison's result and whether its
gate fails), run (the interleaved `harness run` processes), store (ab.json and the run pools
read back), cli (`python -m racegate.harness.ab compare | power`).
"""
