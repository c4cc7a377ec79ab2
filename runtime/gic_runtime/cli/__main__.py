"""``python -m gic_runtime.cli``: the ``gic`` command."""

from gic_runtime.cli.app import main

raise SystemExit(main())
