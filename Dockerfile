# The trainguard image: one image, four roles (`trainguard webhook|controller|cache-agent|render`).
# Built by `docker build .` (hack/kind.sh) or, with no Docker engine, by hack/images.sh (BuildKit, the base built
# from Debian), which the real-node tests (make test-node) run.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
# The pinned dependencies first, in a layer of their own: a change to the code alone reuses it from the build cache.
COPY requirements-build.lock requirements.lock ./
RUN python -m venv /opt/trainguard \
 && /opt/trainguard/bin/pip install --no-cache-dir -r requirements-build.lock \
 && /opt/trainguard/bin/pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml README.md ./
COPY webhook ./webhook
COPY controller ./controller
RUN /opt/trainguard/bin/pip install --no-cache-dir --no-deps --no-build-isolation .

FROM python:3.11-slim-bookworm
COPY --from=build /opt/trainguard /opt/trainguard
# Non-root, numeric UID so `runAsNonRoot: true` can verify it without /etc/passwd.
USER 65532:65532
ENV PATH=/opt/trainguard/bin:$PATH PYTHONUNBUFFERED=1
ENTRYPOINT ["trainguard"]
