"""toolwatch.sinks."""
