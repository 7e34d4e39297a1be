"""One module per CLI verb (as asv's `commands/`): each parses, calls a function, prints."""
