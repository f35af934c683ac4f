"""The entry points: the command line (cli), the Launch form's logic (launch_form), background
jobs the dashboard launches (jobs), the worker process that runs them (worker) and the step
profiler's command (profiler). The top layer: nothing else in runners imports it."""
