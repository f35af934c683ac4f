"""schedlab's engine room: workloads, engines, schedulers, drivers, metrics and the result store.

Plain Python, no UI code: the dashboard (app.py, pages/) and the CLI (``python -m runners``)
both call into this package.
"""

__version__ = "0.1.0"
