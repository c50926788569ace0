"""racegate's built-in workload: a DFlash drafter training step on transformers' Qwen3 parts."""
