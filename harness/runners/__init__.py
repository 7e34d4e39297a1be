"""Strategy runners, child side only: one module per framework family of strategies, imported
inside the worker process (which processes a case needs is harness.launch.placement's)."""
