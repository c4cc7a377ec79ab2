"""GIC runtime: keyed state with a durable changelog, checkpoints and savepoints."""
