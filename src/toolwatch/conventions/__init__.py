"""toolwatch.conventions."""
