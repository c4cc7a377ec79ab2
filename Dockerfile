# syntax=docker/dockerfile:1
# Images for GIC. Build from the repository root:
#
#   docker build --target spark-runtime -t gic-spark:0.1.0 .
#       Spark driver/executor image with the GIC runtime installed. The Spark base matches
#       the pinned PySpark version (4.3.0) so driver and executors run the same Python-side
#       code as `pip install gic[spark]`.
#
#   docker build --target operator -t gic-operator:0.1.0 .
#       The GIC Kubernetes operator (charts/gic-operator deploys it): the wheel with the
#       `operator` extra on python:3.11-slim, running as the non-root user gic (uid 10001).

ARG SPARK_IMAGE=apache/spark:4.3.0-python3
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG JDK_IMAGE=eclipse-temurin:17-jdk

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runtime ./runtime
COPY operator ./operator
RUN pip wheel --no-deps --wheel-dir /wheels .

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
USER root
COPY --from=placement-jar /gic-placement.jar /opt/gic/gic-placement.jar
ENV GIC_PLACEMENT_JAR=/opt/gic/gic-placement.jar
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# The example jobs (rate_count.py needs no input), for trying the operator out.
COPY examples /opt/gic/examples
ENV PYSPARK_PYTHON=python3
# Numeric uid (the official images' spark user) so runAsNonRoot can be verified.
USER 185

FROM ${PYTHON_IMAGE} AS operator
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir '/wheels/gic-0.1.0-py3-none-any.whl[operator]' \
    && rm -rf /wheels \
    && groupadd --gid 10001 gic \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin gic
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Numeric user, so Kubernetes can check runAsNonRoot.
USER 10001:10001
ENTRYPOINT ["gic-operator"]
