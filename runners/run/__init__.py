"""The run pipeline: a run's config (config), its preparation and execution (benchmark), the
oracles it used (knowledge) and the capacity estimate the Launch form shows (capacity_estimate).
Above the engines, schedulers, drivers and the store; below studies, views and the app."""
