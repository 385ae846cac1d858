"""toolwatch's benchmark: load generator, bare-decode ceiling and report (``make bench``)."""
