"""Drivers run a policy against engines: virtual time (simulator) now, wall clock for real engines."""
