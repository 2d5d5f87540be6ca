"""FfDL's /v1 shapes, field for field as its specification defines them
(IBM/FfDL restapi/api_v1/swagger/swagger.yml, `definitions`): what FfDL's clients parse."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class BasicModel(BaseModel):
    model_id: str


class BasicNewModel(BasicModel):
    location: str


class Framework(BaseModel):
    name: str
    version: str


class TrainingStatus(BaseModel):
    status: str
    status_description: str
    submitted: str
    completed: str
    status_message: str
    error_code: str


class Training(BaseModel):
    command: str
    cpus: float
    gpus: float
    memory: float
    memory_unit: Literal["MiB", "MB", "GiB", "GB"] = "MiB"
    learners: int
    input_data: list[str]
    output_data: list[str]
    training_status: TrainingStatus


class Datastore(BaseModel):
    data_store_id: str
    type: str
    connection: dict[str, str]


class MetricData(BaseModel):
    # "Values", capitalised, is the specification's own spelling
    model_config = ConfigDict(populate_by_name=True)

    type: str
    timestamp: str
    iteration: int
    values: dict[str, Any] = Field(alias="Values")


class Model(BasicNewModel):
    name: str
    description: str
    framework: Framework
    training: Training
    data_stores: list[Datastore]
    metrics: list[MetricData] = Field(default_factory=list)


class ModelList(BaseModel):
    models: list[Model]


class TrainingUpdate(BaseModel):
    """PATCH /v1/models/{model_id}: FfDL takes "halt"; dlaas takes "resume" as well."""

    status: str = Field(description='"halt" or "resume"')


class Endpoint(BaseModel):
    id: str
    url: str


class EndpointList(BaseModel):
    endpoints: list[Endpoint]


class EventEndpointRegistration(BaseModel):
    url: str | None = None
    type: str | None = None


class MetaInfo(BaseModel):
    training_id: str
    user_id: str
    time: str = Field(description="milliseconds since 1970-01-01, as text (int64)")
    rindex: str = Field(description="the record's 1-based index, as text (int64)")


class LogLine(BaseModel):
    meta: MetaInfo
    line: str


class LogLinesList(BaseModel):
    models: list[LogLine]


class AnyValue(BaseModel):
    type: Literal["STRING", "JSONSTRING", "INT", "FLOAT"]
    value: str


class EMetrics(BaseModel):
    meta: MetaInfo
    etimes: dict[str, AnyValue]
    grouplabel: str
    values: dict[str, AnyValue]


class EMetricsList(BaseModel):
    models: list[EMetrics]
