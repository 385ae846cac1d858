"""toolwatch.references."""
