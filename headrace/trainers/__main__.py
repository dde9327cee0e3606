"""``python -m headrace.trainers run JOB_ID``: the job process (what executors start).

Reads the settings from the environment once (``HEADRACE_BOOTSTRAP``, ``HEADRACE_DFS_ROOT``,
the ``HEADRACE_MAX_*`` caps, and for a gang member ``HEADRACE_GANG_ROLE``/``HEADRACE_WORKER_INDEX``
...: see ``headrace.trainers.distributed.peers``) and exits with the job's exit code (0 ok, 65
permanent, 75 retriable). Invalid settings are permanent: a retry would read the same environment.
``HEADRACE_MLFLOW_*`` (``trainers.run_log``) make the job an MLflow run too.
"""

from __future__ import annotations

import argparse
import os
import sys

from headrace.core.errors import HeadraceError, RetriableError
from headrace.core.settings import load_settings
from headrace.streams.connection import connection_for
from headrace.streams.topics import ControlTopics
from headrace.trainers.distributed.peers import GangMember
from headrace.trainers.executors.base import ExitCode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headrace.trainers")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run one job from jobs/<JOB_ID>/request.json")
    run.add_argument("job_id")
    run.add_argument("--topic-prefix", default="")
    sub.add_parser("ps-node", help="a parameter-server scheduler or server (DMLC_ROLE)")
    args = parser.parse_args(argv)
    if args.cmd == "ps-node":
        from headrace.trainers.backends import serve_parameter_server

        serve_parameter_server()  # MXNet serves and exits on import for these roles
        return ExitCode.OK
    try:
        member = GangMember.from_env(os.environ)
        settings = load_settings()
        conn = connection_for(settings) if settings.bootstrap else None
        from headrace.trainers import stop_rules
        from headrace.trainers.job_process import run_job
        from headrace.trainers.limits import RequestCaps
        from headrace.trainers.run_log import load_run_log_settings

        # An executor names the job it launched (and, the local one, the attempt): it then
        # owns the retries and the final state; run by hand, the job writes its final state.
        supervised = os.environ.get("HEADRACE_JOB_ID") == args.job_id
        attempt = os.environ.get("HEADRACE_JOB_ATTEMPT", "")
        return run_job(root=settings.dfs_root, job_id=args.job_id, conn=conn,
                       topics=ControlTopics.with_prefix(args.topic_prefix),
                       caps=RequestCaps.from_settings(settings), member=member,
                       attempt=int(attempt) if supervised and attempt.isdigit() else None,
                       supervised=supervised, stop_rules=stop_rules.FACTORIES,
                       run_log=load_run_log_settings())
    except HeadraceError as exc:
        print(f"headrace job: {exc}", file=sys.stderr)
        return ExitCode.RETRIABLE if isinstance(exc, RetriableError) else ExitCode.PERMANENT


if __name__ == "__main__":
    sys.exit(main())
