# syntax=docker/dockerfile:1
# Images for GIC. Targets:
#   spark-runtime  Spark driver/executor image with the GIC runtime installed
#                  (docker build --target spark-runtime -t gic-spark:0.1.0 .)
# The Spark base matches the pinned PySpark version (4.3.0) so driver and executors run the
# same Python-side code as `pip install gic[spark]`.

ARG SPARK_IMAGE=apache/spark:4.3.0-python3
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runtime ./runtime
COPY operator ./operator
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${SPARK_IMAGE} AS spark-runtime
USER root
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV PYSPARK_PYTHON=python3
USER spark
