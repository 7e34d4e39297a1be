"""From measurements to the numbers the model takes: collective sweeps and their alpha/beta
fits, which sweeps an estimate reads, links as probed, a library's share of shaped links, and
a workload's numbers with its compute measured here."""
