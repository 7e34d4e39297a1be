"""Strategy runners. Parent side: `layout` (which processes a case needs). Child side: one
module per framework family of strategies, imported only inside the worker process."""
