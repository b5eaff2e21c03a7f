# syntax=docker/dockerfile:1
# captcha-solver worker image: `captcha-worker` (run | simulator | check | stats | ...).
#   docker build -t captcha-solver:0.2.0 .
# Stage 1 builds the project wheel and the wheels of its dependencies; stage 2 installs them into a venv on a clean
# slim base: no compiler, no build frontend, no source tree, and pip removed from the venv. PYTHON_IMAGE selects the
# base (the end-to-end test builds this file unmodified on a local Debian base).

ARG PYTHON_IMAGE=python:3.12.8-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY . .
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m pip wheel --wheel-dir /wheels /wheels/captcha_solver-*.whl \
 && python -m pip wheel --no-deps --wheel-dir /wheels dumb-init==1.2.5.post1

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="captcha-solver" \
      org.opencontainers.image.description="Queue-driven CaptchaAI solving worker (Redis queue, KEDA-autoscaled)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check --no-index --find-links /wheels /wheels/captcha_solver-*.whl dumb-init \
 && /opt/venv/bin/pip uninstall --yes --disable-pip-version-check pip \
 && captcha-worker --help >/dev/null
# Non-root, numeric (runAsNonRoot can verify it); the chart runs it with a read-only root and an emptyDir at /tmp.
USER 10001:10001
# worker /metrics, /healthz, /readyz (METRICS_PORT); the simulator listens on 8080
EXPOSE 9100
# PID 1 is dumb-init, which forwards SIGTERM to the worker. As PID 1 itself the worker would lose a SIGTERM that
# arrives before Python installs its handler (the kernel drops default-action signals to a namespace's init): the
# pod then kept claiming tasks until the kubelet's SIGKILL at the end of the grace period, mid-solve.
ENTRYPOINT ["dumb-init", "--", "captcha-worker"]
CMD ["run"]
