"""The result store: the result files and their typed records (runners.store.models)."""
