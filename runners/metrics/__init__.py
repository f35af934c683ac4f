"""Metric definitions (each defined once): per request, per run, and over time."""
