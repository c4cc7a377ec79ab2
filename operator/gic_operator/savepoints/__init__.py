"""The Savepoint resource kind: its controller, observer, reconciler and status recorder,
its disposal on deletion, and what a job may restore from (shared with the jobs)."""
