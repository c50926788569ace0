"""Release bisection: which torch or transformers release changed the gate's decision, and a
standalone reproducer of the hazard that changed (`python -m racegate bisect | repro`)."""
