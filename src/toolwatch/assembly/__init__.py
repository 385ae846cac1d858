"""toolwatch.assembly."""
