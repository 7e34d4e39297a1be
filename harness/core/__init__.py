"""What every stage shares: the strategy and communication-library records, the case record,
the cluster spec, quantities (parsed and formatted), errors and where results live. Imports
only the workloads and results packages, so that any stage may import it."""
