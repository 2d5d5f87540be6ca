"""The performance model against real CPU learners: predicted and measured step times.

Three multilayer perceptrons (about 0.2, 1.9 and 10 million parameters) train on random data
with PyTorch on the CPU, one thread per learner, each learner a process of its own (as the
local backend runs learners), with 1 and 2 learners and either exchange:
- all-reduce: the gradients all-reduced over gloo as one flat tensor after the backward pass
  (no overlap, as the model assumes), then the learner's own SGD step;
- parameter server: the learners attached to one dlaas-ps sidecar (`learner_image.ps`, sync
  mode, one thread), the weights and gradients in its shared memory, `step()` pushing the
  gradient and waiting for the server's update.

Each model and learner count is one run of its learners, in which every step kind below
takes turns in 10 rounds (so the load other tenants put on this shared machine falls on the
calibrations and the measured steps alike); a step's time is the slowest learner's, and each
figure the median over its steps (`bench._perf_model_learners`).

Calibration (never the measured configuration itself):
- compute: steps at per-learner batches of 64 and 256 with nothing exchanged (for the
  parameter server, computed into the sidecar's slot and not pushed), as many learners
  computing at once as the case has; a line through the two gives `sample_s` and
  `step_overhead_s` of `storage.performance_model` (and the SGD step's time, `update_s`);
- exchange: gradients already computed, of 1 and 32 MiB, all-reduced (2 learners) and pushed
  through a sidecar (1 and 2 learners), each after 3 ms of untimed compute as training has;
  a line through the two sizes gives each exchange's bandwidth and latency in the model's
  formulas (ring: 2 (n-1)/n bytes / bandwidth + 2 (n-1) latency; server: 2 n bytes /
  bandwidth + 2 latency).

Predicted: `step_s` at per-learner batch 128 (global 128 and 256) for each exchange.
Figures: each case's predicted and measured milliseconds; `mape` over all twelve (mean
absolute percentage error, as a fraction; target 0.10), `mape_allreduce`, `mape_ps`; the
calibration; and, for comparison, what one learner's compute calibration alone would predict
for two (`predicted_from_one_learner_ms`: on two shared cores two learners slow each other).

Run from the repository root: `python -m bench.perf_model` (3-5 minutes). The last line is
the FINAL line, one JSON object `{"bench": "perf_model", ...}`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from multiprocessing import get_context
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from bench import ps
from bench._latency_stats import rounded
from bench._perf_model_learners import StepSpec, Task, learner
from bench._small import parse_with_small
from learner_image.rendezvous_port import free_rendezvous_port
from storage.performance_model import Exchange, ModelCosts, Network, step_s

ROOT = Path(__file__).resolve().parents[1]
# layer widths, and steps timed per step kind: about a second of them, so that a step of
# 2 ms is timed as steadily as one of 200
MODELS = {
    "small": ((784, 256, 10), 400),
    "medium": ((784, 1024, 1024, 10), 60),
    "large": ((784, 2048, 2048, 2048, 10), 20),
}
PER_LEARNER_BATCH = 128
CALIBRATION_BATCHES = (64, 256)
EXCHANGE_SIZES = ((1 << 20, 300), (32 << 20, 20))  # bytes, steps timed
TARGET_MAPE = 0.10
EXCHANGES = {"allreduce": Exchange.ALL_REDUCE, "ps": Exchange.PARAMETER_SERVER}
VIA = {"allreduce": "gloo", "ps": "ps"}


def run(world: int, specs: list[StepSpec], scale: float) -> dict[str, float]:
    """The steps on `world` learner processes at once (and a sidecar per ps step kind):
    per step kind, the median over its steps of the slowest learner's time."""
    specs = [
        StepSpec(
            s.name, s.via, round(s.steps * scale), s.widths, s.batch, s.exchange_bytes, s.region
        )
        for s in specs
    ]
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-perf-", dir="/dev/shm"))
    regions = {s.region_name for s in specs if s.via.startswith("ps")}
    # sync, with one thread as each learner has
    sidecars = [ps.start_server(base / region, world, 1, "sync") for region in sorted(regions)]
    try:
        task = Task(world, tuple(specs), port=free_rendezvous_port(), region=str(base))
        context = get_context("spawn")
        results: Queue[Any] = context.Queue()
        processes = [
            context.Process(target=learner, args=(rank, task, results)) for rank in range(world)
        ]
        for process in processes:
            process.start()
        found = [results.get(timeout=900)[1] for _ in processes]
        for process in processes:
            process.join(timeout=60)
    finally:
        for sidecar in sidecars:
            ps.stop(sidecar)
        shutil.rmtree(base, ignore_errors=True)
    # the k-th step is the same step on every learner: it took as long as the slowest one
    return {
        name: statistics.median(max(step) for step in zip(*(f[name] for f in found), strict=True))
        for name in found[0]
    }


def parameters(widths: tuple[int, ...]) -> int:
    return sum(a * b + b for a, b in itertools.pairwise(widths))


def exchange_specs(learners: int) -> list[StepSpec]:
    """Gradients already computed, of 1 and 32 MiB, exchanged by all-reduce (with more than
    one learner) and through the sidecar."""
    vias = ("gloo", "ps") if learners > 1 else ("ps",)
    return [
        StepSpec(f"{via}-{size >> 20}mib", via, steps, exchange_bytes=size)
        for via in vias
        for size, steps in EXCHANGE_SIZES
    ]


def calibrate_exchanges(times: dict[str, float], learners: int) -> dict[str, Network]:
    """A line through each exchange's times for the two sizes: its bandwidth and latency."""
    (low, _), (high, _) = EXCHANGE_SIZES
    networks: dict[str, Network] = {}
    for via, exchange in (("gloo", "allreduce"), ("ps", "ps")):
        if f"{via}-{low >> 20}mib" not in times:
            continue
        t_low, t_high = times[f"{via}-{low >> 20}mib"], times[f"{via}-{high >> 20}mib"]
        per_byte = max(t_high - t_low, 1e-9) / (high - low)
        if exchange == "allreduce":
            # a ring of n sends 2 (n-1)/n of the bytes, 2 (n-1) messages
            hops = 2 * (learners - 1)
            bandwidth = hops / learners / per_byte
            latency = max((t_low - hops / learners * low / bandwidth) / hops, 0.0)
            networks[exchange] = Network(bandwidth_bytes_s=bandwidth, latency_s=latency)
        else:
            # every learner's gradient in, the weights out: 2 n bytes / bandwidth + 2 latency
            bandwidth = 2 * learners / per_byte
            latency = max((t_low - 2 * learners * low / bandwidth) / 2, 0.0)
            networks[exchange] = Network(
                bandwidth_bytes_s=bandwidth, latency_s=latency, server_bandwidth_bytes_s=bandwidth
            )
    return networks


def network_figures(network: Network) -> dict[str, Any]:
    bandwidth = network.server_bandwidth_bytes_s or network.bandwidth_bytes_s
    return {
        "bandwidth_gb_s": rounded(bandwidth / 1e9, 3),
        "latency_us": rounded(network.latency_s * 1e6, 1),
    }


def model_costs(times: dict[str, float], widths: tuple[int, ...], prefix: str) -> ModelCosts:
    """A line through the step times at the calibration batches, and the update's share."""
    small, large = CALIBRATION_BATCHES
    t_small, t_large = times[f"{prefix}-{small}"], times[f"{prefix}-{large}"]
    sample_s = (t_large - t_small) / (large - small)
    updates = [times.get(f"{prefix}-{b}/update", 0.0) for b in CALIBRATION_BATCHES]
    return ModelCosts(
        sample_s=sample_s,
        step_overhead_s=max(t_small - sample_s * small, 0.0),
        model_bytes=parameters(widths) * 4,
        update_s=statistics.fmean(updates),
    )


def measure_model(widths: tuple[int, ...], steps: int, scale: float) -> dict[int, Any]:
    """With 1 and 2 learners: the calibrations (compute with no exchange, the exchanges of
    gradients already computed) and the measured steps (all-reduce, parameter server), all
    taking turns in the same processes."""
    found = {}
    for learners in (1, 2):
        specs = [
            *(StepSpec(f"compute-{b}", "local", steps, widths, b) for b in CALIBRATION_BATCHES),
            *(
                StepSpec(f"ps-compute-{b}", "ps-compute", steps, widths, b, region="model")
                for b in CALIBRATION_BATCHES
            ),
            *exchange_specs(learners),
            StepSpec("allreduce", "gloo", steps, widths, PER_LEARNER_BATCH),
            StepSpec("ps", "ps", steps, widths, PER_LEARNER_BATCH, region="model"),
        ]
        times = run(learners, specs, scale)
        found[learners] = {
            "times": times,
            "costs": {
                "allreduce": model_costs(times, widths, "compute"),
                "ps": model_costs(times, widths, "ps-compute"),
            },
            "networks": calibrate_exchanges(times, learners),
        }
    return found


def model_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"models are among {', '.join(MODELS)}, not {text!r}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=float, default=1.0, help="steps timed, as a multiple")
    parser.add_argument(
        "--models",
        type=model_names,
        default=list(MODELS),
        help=f"models to measure, comma-separated (default {','.join(MODELS)})",
    )
    args = parse_with_small(parser, {"steps": 0.05, "models": ["small"]})
    load_before = os.getloadavg()
    began = time.perf_counter()
    cases: list[dict[str, Any]] = []
    calibration: dict[str, Any] = {}
    for name in args.models:
        widths, steps = MODELS[name]
        found = measure_model(widths, steps, args.steps)
        calibration[name] = {
            f"{learners}_learners": {
                "compute": {
                    exchange: {
                        "sample_us": rounded(costs.sample_s * 1e6, 2),
                        "step_overhead_ms": rounded(costs.step_overhead_s * 1e3, 3),
                        "update_ms": rounded(costs.update_s * 1e3, 3),
                    }
                    for exchange, costs in f["costs"].items()
                },
                **{
                    exchange: {
                        **network_figures(network),
                        **{
                            f"{size >> 20}mib_ms": rounded(
                                f["times"][f"{VIA[exchange]}-{size >> 20}mib"] * 1e3, 3
                            )
                            for size, _ in EXCHANGE_SIZES
                        },
                    }
                    for exchange, network in f["networks"].items()
                },
            }
            for learners, f in found.items()
        }
        for exchange, kind in EXCHANGES.items():
            for learners in (1, 2):
                costs: ModelCosts = found[learners]["costs"][exchange]
                # one learner all-reducing exchanges nothing: any link will do
                network = found[learners]["networks"].get(exchange, found[2]["networks"][exchange])
                measured = found[learners]["times"][exchange]
                global_batch = learners * PER_LEARNER_BATCH
                predicted = step_s(costs, network, learners, global_batch, kind)
                # what a planner that profiled one learner alone would predict
                alone = step_s(found[1]["costs"][exchange], network, learners, global_batch, kind)
                case = {
                    "model": name,
                    "parameters": parameters(widths),
                    "exchange": exchange,
                    "learners": learners,
                    "global_batch": global_batch,
                    "predicted_ms": rounded(predicted * 1e3, 2),
                    "measured_ms": rounded(measured * 1e3, 2),
                    "error": rounded(abs(predicted - measured) / measured, 3),
                    "predicted_from_one_learner_ms": rounded(alone * 1e3, 2),
                }
                cases.append(case)
                print(
                    f"[perf_model] {name} ({case['parameters']:,} parameters), {exchange}, "
                    f"{learners} learner(s): predicted {case['predicted_ms']} ms, measured "
                    f"{case['measured_ms']} ms, error {case['error']}",
                    flush=True,
                )

    def mape(selected: list[dict[str, Any]]) -> float | None:
        return rounded(
            statistics.fmean(
                abs(c["predicted_ms"] - c["measured_ms"]) / c["measured_ms"] for c in selected
            ),
            3,
        )

    print(
        json.dumps(
            {
                "bench": "perf_model",
                "mape": mape(cases),
                "target_mape": TARGET_MAPE,
                "mape_allreduce": mape([c for c in cases if c["exchange"] == "allreduce"]),
                "mape_ps": mape([c for c in cases if c["exchange"] == "ps"]),
                "mape_two_learners": mape([c for c in cases if c["learners"] == 2]),
                "mape_two_learners_from_one_learner_compute": rounded(
                    statistics.fmean(
                        abs(c["predicted_from_one_learner_ms"] - c["measured_ms"])
                        / c["measured_ms"]
                        for c in cases
                        if c["learners"] == 2
                    ),
                    3,
                ),
                "calibration": calibration,
                "cases": cases,
                "machine_cores": os.cpu_count(),
                "load_average_before": rounded(load_before[0], 2),
                "load_average_after": rounded(os.getloadavg()[0], 2),
                "seconds": rounded(time.perf_counter() - began, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
