# The dlaas control plane, two small non-root images from one build:
#   docker build --target api -t dlaas-api:0.1.0 .                               (the default)
#   docker build --target lifecycle-manager -t dlaas-lifecycle-manager:0.1.0 .
# The lifecycle-manager image runs the Celery worker by default; the same image runs the beat
# (`celery -A lifecycle_manager.entrypoints.celery_app:app beat`), the monitor
# (`python -m lifecycle_manager.entrypoints.monitor`) and the pod watcher
# (`python -m lifecycle_manager.backends.kubernetes.pod_watcher`). Neither image carries PyTorch.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY api api
COPY cli cli
COPY storage storage
COPY lifecycle_manager lifecycle_manager
COPY learner_image learner_image
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim AS runtime
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --create-home --uid 10001 dlaas
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels
USER 10001
WORKDIR /home/dlaas
ENV DLAAS_HOME=/home/dlaas/.dlaas

FROM runtime AS lifecycle-manager
CMD ["python", "-m", "lifecycle_manager.entrypoints.worker"]

FROM runtime AS api
EXPOSE 8470
CMD ["python", "-m", "api", "--host", "0.0.0.0", "--port", "8470", "--workers", "2"]
