"""Studies: several schedulers over several seeds (and rates), paired. The plan (plan), its
execution and record (runner), and the executors that run its members (executors). Above the
run pipeline; below views and the app."""
