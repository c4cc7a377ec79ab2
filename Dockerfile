# syntax=docker/dockerfile:1
# Images for GIC. Build from the repository root:
#
#   docker build --target spark-runtime \
#       --build-arg SPARK_IMAGE=apache/spark:4.3.0-python3@sha256:<digest> -t gic-spark:0.1.0 .
#       Spark driver/executor image with the GIC runtime installed. The Spark base matches
#       the pinned PySpark version (4.3.0) so driver and executors run the same Python-side
#       code as `pip install gic[spark]`. It runs as uid 185, the user the operator runs
#       every Spark pod as.
#
#   docker build --target operator -t gic-operator:0.1.0 .
#       The GIC Kubernetes operator (charts/gic-operator deploys it): the wheel with the
#       `operator` extra on python:3.11-slim, running as the non-root user gic (uid 10001).
#
# Without a registry, `make images` builds both targets with podman as
# localhost/gic-spark:0.1.0 and localhost/gic-operator:0.1.0 on bases it builds from Debian
# and PyPI packages (images/build_bases.sh: Debian bookworm, Python 3.11, OpenJDK 17, Spark
# from the locked pyspark wheel in the official images' layout), passing each *_IMAGE as
# localhost/gic-base-<name>:<tag>@sha256:<digest> (docs/operations.md §14.7.8).
#
# Locked inputs, so that the same commit always builds the same images:
#
# * base images by digest: each *_IMAGE argument is `name:tag@sha256:<digest>`, the digest
#   of the tag's multi-platform index (the tag is there for readers only). To move to a
#   newer base, `docker buildx imagetools inspect name:tag` prints the digest of the index
#   ("Digest:"); put it here. The Spark base has no digest here yet: the spark-runtime
#   target refuses to build until SPARK_IMAGE carries one.
# * Python packages from lock files with hashes (requirements/*.lock, `make lock`),
#   installed with --require-hashes; transitive dependencies are pinned as well, and the
#   project's own wheel goes in with --no-deps, in a layer of its own after the locked
#   packages, so a change to the project's code rebuilds only that layer.

ARG SPARK_IMAGE=apache/spark:4.3.0-python3
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b
ARG JDK_IMAGE=eclipse-temurin:17-jdk@sha256:36d9a76dc231587873b103c68a789b85d91b41d314dda69730d6bc43a777f2a9

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
# The build backend from its lock, and no isolated build environment that would fetch an
# unpinned one.
COPY requirements/build.lock /tmp/build.lock
RUN pip install --no-cache-dir --require-hashes -r /tmp/build.lock
COPY pyproject.toml README.md ./
COPY runtime ./runtime
COPY operator ./operator
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# The placement helper jar (docs/architecture.md §13.2), compiled against the Spark
# image's own jars; the runtime finds it through GIC_PLACEMENT_JAR.
FROM ${SPARK_IMAGE} AS spark-jars
FROM ${JDK_IMAGE} AS placement-jar
COPY --from=spark-jars /opt/spark/jars /spark-jars
COPY runtime/gic_runtime/spark/jvm /src
RUN mkdir /classes \
    && javac --release 17 -nowarn -d /classes -cp '/spark-jars/*' $(find /src -name '*.java') \
    && jar cf /gic-placement.jar -C /classes .

FROM ${SPARK_IMAGE} AS spark-runtime
ARG SPARK_IMAGE
USER root
RUN case "${SPARK_IMAGE}" in \
        *@sha256:*) ;; \
        *) echo "SPARK_IMAGE=${SPARK_IMAGE} is not pinned: pass --build-arg" \
                "SPARK_IMAGE=<name>:<tag>@sha256:<digest> (docker buildx imagetools" \
                "inspect <name>:<tag> prints the digest)" >&2; exit 1 ;; \
    esac
COPY --from=placement-jar /gic-placement.jar /opt/gic/gic-placement.jar
ENV GIC_PLACEMENT_JAR=/opt/gic/gic-placement.jar
# The runtime's dependencies and pandas (PySpark's Arrow path needs it); PySpark itself is
# the base's.
COPY requirements/runtime.lock /tmp/runtime.lock
RUN pip install --no-cache-dir --require-hashes -r /tmp/runtime.lock \
    && rm /tmp/runtime.lock
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/*.whl \
    && rm -rf /wheels
# The example jobs (rate_count.py needs no input), for trying the operator out.
COPY examples /opt/gic/examples
ENV PYSPARK_PYTHON=python3
# Numeric uid (the official images' spark user) so runAsNonRoot can be verified; the
# operator runs every driver and executor pod as 185:185.
USER 185

FROM ${PYTHON_IMAGE} AS operator
COPY requirements/operator.lock /tmp/operator.lock
RUN pip install --no-cache-dir --require-hashes -r /tmp/operator.lock \
    && rm /tmp/operator.lock \
    && groupadd --gid 10001 gic \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin gic
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/gic-0.1.0-py3-none-any.whl \
    && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Numeric user, so Kubernetes can check runAsNonRoot.
USER 10001:10001
ENTRYPOINT ["gic-operator"]
