"""The simulator against measurements: every emulated collective, step, wire count and memory
figure predicted and scored, the errors stored for the report and the recommender."""
