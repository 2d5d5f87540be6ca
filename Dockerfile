# The dlaas control plane: API, lifecycle-manager worker and monitor share this image.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY api api
COPY cli cli
COPY storage storage
COPY lifecycle_manager lifecycle_manager
COPY learner_image learner_image
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 dlaas
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER dlaas
ENV DLAAS_HOME=/home/dlaas/.dlaas
EXPOSE 8470
CMD ["python", "-m", "api", "--host", "0.0.0.0", "--port", "8470", "--workers", "2"]
