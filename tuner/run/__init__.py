"""One tuning run: its spec (every input), its folder on disk, the tune loop and the report."""
