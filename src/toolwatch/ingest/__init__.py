"""toolwatch.ingest."""
