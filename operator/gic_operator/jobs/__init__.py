"""The GICJob resource kind: its controller (lock, fresh read, spec checks, wiring), its
observer (a typed view of the driver pod and storage), its reconciler (decisions), the
steps and multi-step actions it takes, its status recorder, the savepoint policy, and the
warnings on GICJobs outside the watched namespaces."""
