"""The race suite shipped with racegate: race cases, probe cases and throughput gates."""
