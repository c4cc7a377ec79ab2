"""GIC Kubernetes operator (GICJob and Savepoint resources)."""
