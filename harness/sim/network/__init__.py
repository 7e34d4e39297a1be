"""Topologies, the links between devices, and timing a schedule on them."""
