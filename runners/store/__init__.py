"""The result store: run folders written and read (result_store), the typed records of the
result files (models), a time-series row (timeseries), the recorder that turns a run's events
into rows and its summary (recording), run ids (run_ids) and output file paths (output_paths).
Above the core modules, workloads, metrics and engines; beside the schedulers; below the
drivers and everything that runs or shows runs."""
