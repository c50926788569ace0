"""racegate's harness: scenarios, isolated runs, outcome classification, probes, gates, reports."""
