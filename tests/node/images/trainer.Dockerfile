# The trainer image of the node tests (localhost/trainguard/trainer:dev, built by hack/images.sh): the base plus the
# project, so a trainer container can `from trainguard.cache.client import open_shards`. The cache client is
# standard library only, so the project goes in with --no-deps: only the pinned installer and build backend are
# downloaded (requirements-build.lock, as the main Dockerfile does). Builds with Docker too:
# `docker build -f tests/node/images/trainer.Dockerfile .`
FROM python:3.11-slim-bookworm
# the installer first, in a layer of its own: a change to the code alone reuses it from the build cache
COPY requirements-build.lock /tmp/
RUN python -m venv /opt/trainer \
 && /opt/trainer/bin/pip install --no-cache-dir -r /tmp/requirements-build.lock \
 && rm /tmp/requirements-build.lock
COPY pyproject.toml README.md /src/
COPY webhook /src/webhook
COPY controller /src/controller
RUN /opt/trainer/bin/pip install --no-cache-dir --no-deps --no-build-isolation /src \
 && rm -rf /src
ENV PATH=/opt/trainer/bin:$PATH PYTHONUNBUFFERED=1
CMD ["python"]
