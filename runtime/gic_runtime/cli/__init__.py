"""The ``gic`` command line (typer + rich); see :mod:`gic_runtime.cli.app`.

``main()`` is the console-script entry point. Importing this package does not import
pyspark.
"""

from gic_runtime.cli.app import app, main

__all__ = ["app", "main"]
