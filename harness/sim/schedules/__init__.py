"""Schedules as data: collectives, parameter-server rounds, pipelines, their closed forms."""
