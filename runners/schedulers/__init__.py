"""Client-side scheduling policies. Each is pure and event-driven: see :mod:`runners.schedulers.base`."""
