"""Engines: the latency model and KV-cache arithmetic shared by all, and the simulated engine."""
