"""`dlaas plan MANIFEST`: what each size the manifest allows would take, and which to pick."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cli.client import ApiError
from cli.context import Invocation, dlaas_command
from cli.errors import CliError, describe_api_error
from cli.output import (
    format_duration,
    format_seconds,
    note,
    print_json,
    print_plain,
    print_table,
)

COLUMNS = (
    "",
    "LEARNERS",
    "GLOBAL BATCH",
    "LEARNER BATCH",
    "STEP",
    "SAMPLES/S",
    "TIME TO FINISH",
    "EFFICIENCY",
)
EXCHANGES = {"allreduce": "all-reduce", "parameter_server": "a parameter server"}


@dlaas_command
def plan(
    inv: Invocation,
    manifest: Annotated[
        Path, typer.Argument(metavar="MANIFEST", help="The manifest.yml, with a performance block.")
    ],
    calibration: Annotated[
        str | None,
        typer.Option(
            "--calibration",
            metavar="JOB_ID",
            help="A completed calibration job (examples/calibrate): plan with the link and "
            "device speed it measured.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Predict step time, throughput and time to finish for each learner count and batch
    the manifest allows, and recommend one (marked *)."""
    if not manifest.is_file():
        problem = "is not a file" if manifest.exists() else "no such file"
        raise CliError(f"MANIFEST {manifest}: {problem}")
    try:
        answer = inv.client().plan(manifest, calibration)
    except ApiError as exc:
        raise CliError(describe_plan_error(exc, manifest, calibration)) from exc
    except OSError as exc:
        raise CliError(f"MANIFEST {manifest}: cannot read it ({exc.strerror or exc})") from exc
    if inv.json:
        print_json(answer)
        return
    candidates: list[dict[str, Any]] = answer.get("candidates") or []
    print_table(COLUMNS, (_row(c) for c in candidates))
    for line in describe_inputs(answer):
        note(line)
    if answer.get("samples") is None:
        note("no performance.samples: ranked by throughput; add samples for a time to finish")
    for candidate in candidates:
        if candidate.get("recommended"):
            print_plain(f"recommended: {describe(candidate)}")


def describe_plan_error(exc: ApiError, manifest: Path, calibration: str | None = None) -> str:
    """A refused plan names the manifest, or the calibration job, and the field at fault,
    and says the fix."""
    if exc.status in (401, 403) or exc.status >= 500:
        return describe_api_error(exc)
    detail = exc.detail or exc.code
    if exc.field and exc.field not in detail:
        detail = f"{exc.field}: {detail}"
    if exc.field == "calibration" and calibration is not None:
        return f"--calibration {calibration}: {detail.removeprefix('calibration: ')}"
    return f"{manifest.name}: {detail}"


def describe_inputs(answer: dict[str, Any]) -> list[str]:
    """What the prediction went by: the exchange and its links, the compute a sample when
    a calibration gave it, and the figures' sources."""
    network = answer.get("network") or {}
    costs = answer.get("costs") or {}
    calibration = answer.get("calibration") or {}
    measured = f"measured by calibration {calibration.get('job_id')}"
    link = (
        f"{EXCHANGES.get(answer.get('exchange', ''), answer.get('exchange'))} over links of "
        f"{format_rate(network.get('bandwidth_bytes_s'))} and "
        f"{format_seconds(network.get('latency_s'))} latency"
    )
    lines = [f"{link} ({measured})" if network.get("source") == "calibration" else link]
    if costs.get("source") == "calibration":
        flops = calibration.get("device_flops_s") or 0.0
        lines.append(
            f"{format_seconds(costs.get('sample_seconds'))} a sample: "
            f"{costs.get('flops_per_sample'):.3g} FLOPs at {flops / 1e9:.3g} GFLOP/s ({measured})"
        )
    if calibration and network.get("source") != "calibration":
        lines.append(
            f"calibration {calibration.get('job_id')} timed no link (one learner): the links "
            "are DLAAS_NETWORK_*'s"
        )
    return lines


def describe(candidate: dict[str, Any]) -> str:
    """ "2 learners at a global batch of 256 (128 a learner): 95 ms a step, ..." """
    learners = candidate["learners"]
    finish = candidate.get("time_to_finish_s")
    parts = [
        f"{format_seconds(candidate['step_s'])} a step",
        f"{format_throughput(candidate['throughput_samples_s'])} samples/s",
        *([f"{format_duration(finish)} to finish"] if finish is not None else []),
        f"{format_percent(candidate['scaling_efficiency'])} scaling efficiency",
    ]
    return (
        f"{learners} learner{'s' if learners != 1 else ''} at a global batch of "
        f"{candidate['global_batch']} ({format_batch(candidate['learner_batch'])} a learner): "
        + ", ".join(parts)
    )


def _row(candidate: dict[str, Any]) -> tuple[str, ...]:
    return (
        "*" if candidate.get("recommended") else "",
        str(candidate["learners"]),
        str(candidate["global_batch"]),
        format_batch(candidate["learner_batch"]),
        format_seconds(candidate["step_s"]),
        format_throughput(candidate["throughput_samples_s"]),
        format_duration(candidate.get("time_to_finish_s")),
        format_percent(candidate["scaling_efficiency"]),
    )


def format_batch(value: float) -> str:
    """128.0 -> "128"; 85.33 -> "85.3" (the batch does not split evenly)."""
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def format_throughput(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def format_percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def format_rate(value: float | None) -> str:
    """Bytes a second as "1.25 GB/s"."""
    if value is None:
        return "-"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} B/s"


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
