"""A driver launch: the frozen plan, the driver's configuration and the manifests (pure
functions from the plan)."""
