"""Stage 2, the isolated run: child processes, threads under a schedule, cache states."""
