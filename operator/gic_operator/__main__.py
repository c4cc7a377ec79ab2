"""``python -m gic_operator``: the same as the ``gic-operator`` command."""

from gic_operator.main import main

raise SystemExit(main())
