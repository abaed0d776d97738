# The trainguard image: one image, four roles (`trainguard webhook|controller|cache-agent|render`).
# Built only on machines with a Docker engine (see hack/kind.sh); the test suite never needs it.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY requirements-build.lock requirements.lock pyproject.toml README.md ./
COPY webhook ./webhook
COPY controller ./controller
RUN python -m venv /opt/trainguard \
 && /opt/trainguard/bin/pip install --no-cache-dir -r requirements-build.lock \
 && /opt/trainguard/bin/pip install --no-cache-dir -r requirements.lock \
 && /opt/trainguard/bin/pip install --no-cache-dir --no-deps --no-build-isolation .

FROM python:3.11-slim-bookworm
COPY --from=build /opt/trainguard /opt/trainguard
# Non-root, numeric UID so `runAsNonRoot: true` can verify it without /etc/passwd.
USER 65532:65532
ENV PATH=/opt/trainguard/bin:$PATH PYTHONUNBUFFERED=1
ENTRYPOINT ["trainguard"]
