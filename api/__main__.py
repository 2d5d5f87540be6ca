"""`python -m api`: serve the dlaas API (`storage.http_server`: uvicorn with read timeouts
and connection caps)."""

from __future__ import annotations

import argparse
import os

from storage.http_server import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m api", description="Serve the dlaas API.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8470)
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("DLAAS_API_WORKERS") or 1),
        help="worker processes (default: DLAAS_API_WORKERS, else 1)",
    )
    parser.add_argument("--access-log", action="store_true")
    args = parser.parse_args()
    serve(
        "api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        access_log=args.access_log,
        log_level="info",
    )


if __name__ == "__main__":
    main()
