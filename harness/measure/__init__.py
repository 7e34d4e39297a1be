"""Measurement: statistics of step times and what a worker reports about itself."""
