# syntax=docker/dockerfile:1
# One image for every normfree service: the API, the Ray head and the Ray workers (CPU or GPU).
# Why one image: a Ray cluster needs the same Python, Ray and normfree on every node, and a
# study's driver (a Ray job on the head) imports the same code as its trials (tasks on workers).
#
#   CPU (default):  docker build -t normfree .
#   CUDA variant:   docker build -t normfree:cuda \
#                     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#
# torch is pinned (the same pin as the Makefile); only the wheel index changes between the CPU and
# the CUDA build, so both images run the same torch version and the same generated kernels.

ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Triton compiles a small C launcher per kernel signature with the system C compiler at run time;
# without gcc a GPU worker could not launch the generated kernels.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

# torch first, from the chosen index: installing the package afterwards then finds its torch
# requirement satisfied and cannot pull a different (multi-GB CUDA) build.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

WORKDIR /opt/normfree
COPY pyproject.toml README.md ./
COPY normfree ./normfree
RUN pip install . && normfree --version
COPY deploy ./deploy

# Non-root at run time. /var/lib/normfree is the per-node cache root (kernels/, triton/,
# datasets/): compose mounts one named volume there per node, shared by that node's workers.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin normfree \
    && mkdir -p /var/lib/normfree/kernels /var/lib/normfree/triton /data \
    && chown -R normfree:normfree /var/lib/normfree /data
USER normfree

ENV NORMFREE_KERNEL_CACHE=/var/lib/normfree/kernels \
    NORMFREE_DATA_ROOT=/data \
    TRITON_CACHE_DIR=/var/lib/normfree/triton

# API (8000), Ray GCS (6379), Ray dashboard and Jobs API (8265).
EXPOSE 8000 6379 8265

# The default command serves the API; compose overrides command and healthcheck for Ray nodes.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=5 \
    CMD ["python", "/opt/normfree/deploy/healthcheck.py", "api"]

CMD ["normfree", "serve", "--host", "0.0.0.0"]
