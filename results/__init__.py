"""The results store: a versioned schema and one Parquet file per finished case.

It stores and loads rows and knows nothing of runners or the simulator (DESIGN.md).
"""

from results.schema import COLUMNS, SCHEMA_VERSION, ResultRow, Status
from results.store import (
    CorruptResultWarning,
    ResultsStore,
    load,
    load_steps,
)

__all__ = [
    "COLUMNS",
    "SCHEMA_VERSION",
    "CorruptResultWarning",
    "ResultRow",
    "ResultsStore",
    "Status",
    "load",
    "load_steps",
]
