"""Stage 1, the scenario: what one run is, its vocabulary, settings and workload interface."""
