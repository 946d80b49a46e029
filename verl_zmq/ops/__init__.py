"""Operator tools: what a person runs around a job (dashboard, plots, TensorBoard,
log views, run listing, export, serving, preflight checks). Nothing here runs
inside a role; roles never import it."""
