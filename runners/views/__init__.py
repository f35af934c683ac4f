"""What the pages and the CLI draw, computed without streamlit: charts, comparison tables,
study tables and charts, the live view and the Demo. Above studies and runs; below the app.
Views read the typed records of runners.store.models."""
