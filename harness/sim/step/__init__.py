"""One training step of each strategy, timed on a system."""
