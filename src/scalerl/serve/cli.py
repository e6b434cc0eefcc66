"""``scalerl serve [DIR ...] [--port N] [--host ADDR]``: the live page over run and study folders."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from pathlib import Path

HELP = """A live local page of runs, their forecasts, and studies.

  scalerl serve runs/ --port 8765        # then open http://127.0.0.1:8765

Serves every run (a folder with metrics.jsonl) and study (a sweep folder) under the folders
given (default: ./runs, else the current folder), finished or training: it reads only what
runs write, so it can start before, during or after them. The runs list has each run's
state, step, reward, latest validation, forecast at its budget, time to its target and
P(reach); a run's page draws its validation with the forecast band ahead of the data and
updates as records arrive; a study's page compares its runs and shows an adaptive study's
decisions. It listens on 127.0.0.1 unless --host says otherwise. Bad input is one sentence,
exit code 2.
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="a live local page of runs, forecasts and studies", description=HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("dirs", nargs="*", type=Path, metavar="DIR", help="run or study folders (default: ./runs or .)")
    p.add_argument("--port", type=int, default=8765, help="TCP port (default 8765)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.set_defaults(func=handle)


def _fail(message: str) -> int:
    print(f"scalerl serve: {message}", file=sys.stderr)
    return 2


def handle(args: argparse.Namespace) -> int:
    dirs = args.dirs or [Path("runs") if Path("runs").is_dir() else Path(".")]
    missing = next((d for d in dirs if not d.is_dir()), None)
    if missing is not None:
        return _fail(f"{missing} is not a folder; give run or study folders.")
    locked = next((d for d in dirs if not os.access(d, os.R_OK | os.X_OK)), None)
    if locked is not None:
        return _fail(f"{locked} cannot be read by this user; give a folder it may read, or serve as its owner.")
    if not 0 < args.port < 65536:
        return _fail(f"--port must lie in 1..65535, got {args.port}.")
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(args.host).version == 6 else socket.AF_INET
    except ValueError:
        return _fail(f"--host {args.host!r} is not an IP address (127.0.0.1 serves this machine only).")
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((args.host, args.port))
        except OSError as err:
            return _fail(f"cannot listen on {args.host}:{args.port} ({err.strerror}); choose another --port.")
    import uvicorn

    from scalerl.serve.runs import Served

    for d in dirs:  # a folder with no runs yet is served all the same: runs appear as they start
        if not Served([d]).discover():
            print(f"scalerl serve: {d} holds no runs yet (no metrics.jsonl below it); they appear as they start.")

    from scalerl.serve.app import build_app

    if not ipaddress.ip_address(args.host).is_loopback:
        print(f"scalerl serve: listening on {args.host}, so other machines can reach these runs.")
    print(f"scalerl serve: http://{args.host}:{args.port}/ over {', '.join(str(d) for d in dirs)} (Ctrl-C stops)",
          flush=True)  # fmt: skip
    # a request under way gets a few seconds to finish on SIGTERM or Ctrl-C; then the server goes,
    # and the command says so in one line (``scalerl.cli``: exit 143 or 130)
    try:
        uvicorn.run(build_app(dirs), host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)
    except Exception as stop:  # ``scalerl.cli.Stopped``: uvicorn let the requests under way finish (5 s at most),
        if not isinstance(getattr(stop, "code", None), int):  # then raised the signal it had caught
            raise
        print(f"scalerl serve: stopped by {stop}.", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # a forecast or a large read may still be running in a worker thread: nothing of it is kept,
        # so the process ends now instead of joining it at exit (probe: 30 s and more after heavy requests)
        os._exit(stop.code)
    return 0
