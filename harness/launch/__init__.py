"""Launchers: start a case's processes on a cluster, enforce its timeout, collect reports."""
