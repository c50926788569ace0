"""Stage 3, the judged record: outcomes, metrics, baselines, expectation tables, summaries."""
