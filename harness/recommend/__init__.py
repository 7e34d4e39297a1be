"""The decision: targets a user names, every candidate configuration (measured, predicted,
simulated; model-parallel layouts where one replica fits no device), the rule that picks a
device count per strategy under a budget, and the verdict."""
