# The featureflow image: the Spark image of the compose cluster, plus Python 3.11 with
# featureflow, its compiled Mojo kernels and Spark's Kafka connector. The compose `job`
# (driver) and `spark-worker` (executors) services run it, so the driver and the Python
# workers import the same package and kernels.
#
#   docker compose build          # or: docker build -t featureflow:0.1.0 .
#
# Python: the Spark image's own python3 is not the 3.11 that featureflow's pins need
# (pyproject.toml: requires-python ">=3.11,<3.12"), so uv installs a standalone
# CPython 3.11 under /opt/featureflow/python.
#
# Kernels: `make kernels` compiles mojo_ops/ with Mojo from PyPI (measured on x86-64
# Linux; other platforms depend on Mojo's wheels). Where they can't be built, `--build-arg FEATUREFLOW_KERNELS=numpy`
# skips the build: without compiled kernels featureflow.ops falls back to its numpy
# reference implementation by itself (same features, slower); the job's `kernels:`
# log line and `featureflow doctor` say which backend runs and why.

ARG SPARK_IMAGE=apache/spark:4.2.0-python3
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.9.5

FROM ${UV_IMAGE} AS uv

# ---- build: the venv, the kernels (make kernels), the Kafka connector jars ----------
FROM ${SPARK_IMAGE} AS build
ARG FEATUREFLOW_KERNELS=mojo
USER root
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      make maven ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PYTHON_INSTALL_DIR=/opt/featureflow/python \
    UV_LINK_MODE=copy \
    FEATUREFLOW_HOME=/opt/featureflow/home
RUN uv python install 3.11 \
 && ln -s "$(uv python find 3.11)" /usr/local/bin/python3.11
WORKDIR /src
COPY pyproject.toml README.md Makefile ./
COPY src ./src
COPY mojo_ops ./mojo_ops
COPY scripts ./scripts
# `make kernels` builds with a throwaway .venv (dev tools included) and writes the
# kernels and their Mojo runtime libraries into src/featureflow/ops/_native/.
RUN if [ "$FEATUREFLOW_KERNELS" = mojo ]; then make kernels PYTHON=python3.11; fi
# The image's venv: featureflow installed (not editable), kernels as package data; the
# build record goes along so the loader checks the kernels' source digest.
RUN uv venv --python 3.11 /opt/featureflow/venv \
 && uv pip install --python /opt/featureflow/venv/bin/python --no-cache . \
 && if [ "$FEATUREFLOW_KERNELS" = mojo ]; then \
      site="$(/opt/featureflow/venv/bin/python -c 'import featureflow.ops, pathlib; print(pathlib.Path(featureflow.ops.__file__).parent)')" \
      && cp src/featureflow/ops/_native/build_info.json "$site/_native/" \
      && FEATUREFLOW_BACKEND=mojo /opt/featureflow/venv/bin/python -c \
           'import featureflow.ops as o; print("kernels:", o.backend(), o.backend_reason())'; \
    fi
# Spark's Kafka connector (and the broker jars), so the job needs no Maven at run time.
RUN /opt/featureflow/venv/bin/featureflow jars fetch

# ---- runtime: the Spark image + /opt/featureflow -------------------------------------
FROM ${SPARK_IMAGE}
USER root
COPY --from=build /opt/featureflow /opt/featureflow
COPY jobs /opt/featureflow/jobs
COPY schemas /opt/featureflow/schemas
COPY feature_repo /opt/featureflow/feature_repo
# Checkpoints (a volume in docker-compose.yml) and the repo's data, the Spark user's.
RUN mkdir -p /var/lib/featureflow/checkpoints /opt/featureflow/feature_repo/data \
 && chown -R spark:spark /var/lib/featureflow /opt/featureflow/feature_repo \
 && chmod 0700 /var/lib/featureflow
ENV PATH=/opt/featureflow/venv/bin:/opt/spark/bin:${PATH} \
    PYSPARK_PYTHON=/opt/featureflow/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/featureflow/venv/bin/python \
    FEATUREFLOW_HOME=/opt/featureflow/home
WORKDIR /opt/featureflow
USER spark
