"""Policies: the networks' shared interface."""
