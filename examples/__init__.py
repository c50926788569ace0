"""Example workloads that live outside model/: proof that racegate gates code it has never seen."""
