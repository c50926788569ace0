"""The deterministic cross-thread probes: the registry and runner, the probe bodies, their kit."""
