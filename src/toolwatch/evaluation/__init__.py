"""toolwatch.evaluation."""
