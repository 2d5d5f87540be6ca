"""dlaas configuration, read from `DLAAS_*` environment variables."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from storage.connection_caps import DEFAULT_FD_HEADROOM
from storage.memory_sizes import machine_memory, parse_memory

# A JSON file of settings (by their names without the prefix: {"redis_url": ...}), read
# under the environment's: a long-lived service keeps its secrets there, in a 0600 file,
# rather than in its environment, which its children inherit.
SETTINGS_FILE_ENV = "DLAAS_SETTINGS_FILE"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = [init_settings, env_settings, dotenv_settings]
        if path := os.environ.get(SETTINGS_FILE_ENV, "").strip():
            if not Path(path).is_file():
                raise ValueError(
                    f"{SETTINGS_FILE_ENV}={path} is not a readable file; give the JSON file of "
                    "settings, or unset it"
                )
            sources.append(JsonConfigSettingsSource(settings_cls, json_file=Path(path)))
        return (*sources, file_secret_settings)

    home: Path = Field(default_factory=lambda: Path.home() / ".dlaas")
    database_url: str = ""
    redis_url: str = "redis://127.0.0.1:6379/0"

    object_store: Literal["local", "s3"] = "local"
    objects_dir: Path | None = None
    s3_endpoint_url: str | None = None
    s3_bucket: str = "dlaas"
    s3_access_key: str | None = None
    s3_secret_key: str | None = None
    s3_region: str = "us-east-1"

    # When set, the API makes sure a user "admin" with this token exists (first start-up).
    admin_token: str | None = None
    # FfDL's /v1 API: take the user FfDL's gateway names in `X-Watson-Userinfo` (its
    # bluemix-instance-id, an existing dlaas user) instead of a bearer token. Only behind a
    # trusted gateway that strips the header from clients and adds `X-Dlaas-Gateway-Token`
    # with `v1_gateway_token`: learners reach the API directly, so a header without that
    # secret is ignored (else a job's code could name any user).
    v1_trusted_userinfo: bool = False
    v1_gateway_token: str | None = None
    # The API's longest wait on the database server and on Redis (a connection, a statement,
    # a command); past it the request is answered 503 naming the one that did not answer.
    database_timeout_s: float = 30.0
    redis_timeout_s: float = 10.0
    # Learners reach Redis as an ACL user of their own job (`storage.job_redis_users`); turn
    # off only for a Redis that refuses ACL commands (then learners get the platform's URL).
    redis_job_users: bool = True

    # Bytes each user may keep in data containers and jobs' results together (0: no limit);
    # past it, uploads and submissions are refused, running jobs' results still stored.
    storage_quota_bytes: int = 100 * 1024**3

    # How long a POST's answer is kept for retries sent with the same Idempotency-Key.
    idempotency_retention_s: float = 24 * 3600.0
    # A model archive stored for a submission that has no job row this long after is removed.
    orphan_archive_after_s: float = 3600.0
    # A deleted job's row, events and learners are dropped this long after the deletion.
    deleted_job_retention_s: float = 7 * 24 * 3600.0
    # Events of finished jobs are dropped once this old; a halted job's live streams expire
    # this long after it halted (its stored log and metrics keep every line).
    event_retention_s: float = 180 * 24 * 3600.0
    halted_streams_after_s: float = 24 * 3600.0
    # Requests per second (and the burst above it) per token and per client address, past
    # which the API answers 429; 0 turns a limit off. Log follows held at once per user.
    rate_limit_per_s: float = 20.0
    rate_limit_burst: int = 200
    address_rate_limit_per_s: float = 100.0
    address_rate_limit_burst: int = 1000
    max_follows_per_user: int = 16
    # The HTTP servers (the API's and the node agent's, `storage.http_server`): a connection
    # that has not sent a whole request head this long after it opened (or after its first
    # byte of a later request) is closed, as is one that sends no body bytes this long while
    # a request's body is due. Per serving process, connections from one client address past
    # `http_max_connections_per_address` are closed at once, and all of them together stay
    # under the open-file limit (raised to its hard limit at start) less
    # `http_fd_headroom` files kept for the database, Redis and files; at that cap the
    # connection that has waited longest for a request head makes room for a new one.
    # `http_max_connections` lowers the total cap (0: as the open-file limit allows).
    # On SIGTERM, requests still open get `http_shutdown_grace_s` to end before they are
    # closed: a followed log or event stream never ends of itself and held the server
    # until it was killed (`dlaas down` waited out its whole 10 s); its clients resume
    # from the last event id, and a learner's cut upload is sent again at its next poll.
    http_shutdown_grace_s: int = Field(default=8, ge=0)
    http_header_timeout_s: float = Field(default=10.0, gt=0)
    http_body_timeout_s: float = Field(default=30.0, gt=0)
    http_max_connections_per_address: int = Field(default=256, ge=1)
    http_max_connections: int = Field(default=0, ge=0)
    http_fd_headroom: int = Field(default=DEFAULT_FD_HEADROOM, ge=0)

    # The API's address as learners reach it: their runners read and write the job's objects
    # through its object gateway (`/v2/job-objects`) with a token minted for the job, and
    # hold no credential of the object store itself. The lifecycle manager needs it.
    api_url: str = ""
    # Requests per second (and the burst) one job's credentials may send to the gateway.
    job_objects_rate_limit_per_s: float = 1000.0
    job_objects_rate_limit_burst: int = 5000

    cluster_backend: Literal["local", "kubernetes"] = "local"
    agent_url: str = "http://127.0.0.1:8471"
    # The bearer token the node agent requires of every request, given as itself or as a
    # file holding it (`dlaas up` writes one, 0600); the agent and its clients read it.
    agent_token: str | None = None
    agent_token_file: Path | None = None
    # The node agent's listening address (loopback unless told otherwise), and the names,
    # comma-separated, it answers to in the Host header besides 127.0.0.1, localhost and
    # that address (compose: the service name its clients use, "agent").
    agent_bind: str = "127.0.0.1"
    agent_allowed_hosts: str = ""
    # A node agent running as root runs each learner's program as a uid of its own, from
    # this base on, so a program reads nothing of the runner's, the agent's or another
    # learner's; `agent_work_dir` is where learners' working directories go (it must be
    # traversable by those uids: not under a 0700 DLAAS_HOME).
    # on: programs get uids of their own (the agent must run as root); off: they run as the
    # agent's user; auto: on when the agent is root and its Python is usable by other users,
    # or can be shown to them in a namespace of their own (an interpreter under a 0700 home).
    agent_isolation: Literal["auto", "on", "off"] = "auto"
    # Accept the jobs of users who are not admins when the local backend's nodes run every
    # job as one OS user (they then can read each other's files): refused by default.
    allow_shared_nodes: bool = False
    agent_program_uid_base: int = Field(default=900_000, ge=1000)
    agent_program_uids: int = Field(default=10_000, ge=1)
    agent_work_dir: Path | None = None
    # Stop every learner (SIGTERM, their checkpoints taken, SIGKILL after the agent's grace)
    # when the agent itself is stopped: where the agent's end is the node's, as in a compose
    # container, whose stop would otherwise kill the learners with no checkpoint.
    agent_stop_learners_on_exit: bool = False
    # The `local` backend's one node, as the lifecycle manager reports it: its GPUs (pretend
    # ones: learners that ask for GPUs run on CPU, told so), their product name, its CPUs
    # and memory ("16GiB", "512Mi", bytes); by default what this machine has.
    local_gpus: int = Field(default=0, ge=0)
    local_gpu_product: str = "pretend"
    local_cpus: float = Field(default_factory=lambda: float(os.cpu_count() or 1), gt=0)
    local_memory: Annotated[int, BeforeValidator(parse_memory)] = Field(
        default_factory=machine_memory
    )

    # The `kubernetes` backend. API server: `kube_api_url` if set, else the in-cluster
    # service account, else the kubeconfig (`KUBECONFIG`, `kube_context`).
    kube_api_url: str | None = None
    kube_context: str | None = None
    kube_namespace: str = "default"
    kube_learner_image: str = "dlaas-learner:0.1.0"
    kube_learner_gpu_image: str | None = None  # for learners with GPUs; default: the above
    # The learner image's interpreter, absolute: learner pods run dlaas's Python with it.
    kube_learner_python: str = "/usr/local/bin/python"
    kube_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    kube_node_selector: dict[str, str] = Field(default_factory=dict)  # JSON in the env
    kube_tolerations: list[dict[str, Any]] = Field(default_factory=list)  # JSON in the env
    kube_gang_admission: bool = True  # create a gang only when the nodes can hold all of it
    kube_stop_grace_s: int = 30
    # Each job's NetworkPolicy: its learner pods reach their gang peers, DNS, and the
    # platform's redis, s3 and api pods in `kube_platform_namespace` (default: the learners'
    # namespace), plus these address blocks (an external S3 endpoint); nothing else.
    kube_platform_namespace: str | None = None
    kube_learner_egress_cidrs: list[str] = Field(default_factory=list)  # JSON in the env
    kube_learner_ephemeral_storage: str = "50Gi"  # per learner container, its scratch included
    kube_request_timeout_s: float = 10.0
    kube_image_pull_timeout_s: float = 300.0  # a learner whose image cannot be pulled fails

    # The cluster's links as the performance model sees them (`storage.performance_model`):
    # each learner's bandwidth (bytes a second) and latency, and the parameter server's
    # (default: a learner's). Measure them with `python -m bench.perf_model`.
    network_bandwidth_bytes_s: float = Field(default=1.25e9, gt=0)  # 10 Gb/s
    network_latency_s: float = Field(default=5e-5, ge=0)
    network_server_bandwidth_bytes_s: float | None = Field(default=None, gt=0)
    # Elastic jobs: how often the autoscaler reconsiders their sizes, and what a resize is
    # taken to cost (a checkpoint, a stop and a restart) until one is measured.
    autoscale_interval_s: float = Field(default=60.0, gt=0)
    resize_cost_s: float = Field(default=30.0, ge=0)
    # A queued job no node set could ever hold (nodes left, a quota was lowered) fails after
    # staying so this long, saying why; a node that comes back within it keeps the job.
    unschedulable_fail_after_s: float = Field(default=600.0, gt=0)

    # A file the monitor, beat and pod watcher keep refreshing while alive (exec probes).
    liveness_file: Path | None = None

    max_archive_bytes: int = 256 * 1024 * 1024
    max_archive_files: int = 10_000
    max_archive_unpacked_bytes: int = 2 * 1024 * 1024 * 1024
    max_compression_ratio: float = 200.0
    # One `PUT /v2/data/...` body; larger bodies are refused (413) before they are read.
    max_data_upload_bytes: int = 5 * 1024**3
    # One object a learner stores through the object gateway (a checkpoint file, a result).
    max_job_object_bytes: int = 64 * 1024**3

    @model_validator(mode="after")
    def _gateway_token_with_trusted_userinfo(self) -> Settings:
        if self.v1_trusted_userinfo and not self.v1_gateway_token:
            raise ValueError(
                "DLAAS_V1_TRUSTED_USERINFO=true needs DLAAS_V1_GATEWAY_TOKEN, the secret the "
                "trusted gateway adds as X-Dlaas-Gateway-Token: without it anything that "
                "reaches the API (a job's code included) could name any user"
            )
        return self

    @model_validator(mode="after")
    def _derive_paths(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite+aiosqlite:///{self.home / 'dlaas.db'}"
        if self.objects_dir is None:
            self.objects_dir = self.home / "objects"
        return self
