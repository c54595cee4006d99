"""Turn a running emulator's monitoring knobs from a shell (the demo makes a straggler this way).

    python -m gcpgpu.fakes.monitoring straggler demo-2 0.5      # demo-2 at half its peers' pace
    python -m gcpgpu.fakes.monitoring agents --no-dcgm          # no DCGM profiling metrics
    python -m gcpgpu.fakes.monitoring agents --interval 10      # the agents collect every 10 s
    python -m gcpgpu.fakes.monitoring job 1234567890 --replicas 4

The emulator is found from --emulator HOST:PORT or GCPGPU_EMULATOR (its REST address).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request

from . import configure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcpgpu.fakes.monitoring", description=__doc__.split("\n")[0])
    parser.add_argument("--emulator", default=os.environ.get("GCPGPU_EMULATOR"), help="HOST:PORT (REST)")
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("straggler", help="make one VM (or one GPU) slow")
    s.add_argument("instance")
    s.add_argument("factor", type=float, nargs="?", default=0.5)
    s.add_argument("--gpu", type=int)
    a = sub.add_parser("agents", help="which agents report GPU metrics")
    a.add_argument("--ops-agent", dest="ops_agent", action=argparse.BooleanOptionalAction, default=None)
    a.add_argument("--dcgm", action=argparse.BooleanOptionalAction, default=None)
    a.add_argument("--instance", action="append", dest="instances")
    a.add_argument("--interval", type=float, dest="interval_s",
                   help="the agents' collection_interval in seconds (the Ops Agent's default: 60)")
    j = sub.add_parser("job", help="a Vertex AI job whose cloudml_job metrics to make up")
    j.add_argument("job_id")
    j.add_argument("--replicas", type=int, default=2)
    j.add_argument("--machine-type", default="a3-highgpu-8g")
    args = parser.parse_args(argv)
    if not args.emulator:
        parser.error("no emulator: pass --emulator HOST:PORT or set GCPGPU_EMULATOR")
    with urllib.request.urlopen(f"http://{args.emulator}/_emulator/info", timeout=5) as r:  # noqa: S310 - loopback
        grpc_address = json.loads(r.read())["grpc"]
    if args.what == "straggler":
        settings: dict = {"stragglers": [{"instance": args.instance, "factor": args.factor, "gpu": args.gpu}]}
    elif args.what == "agents":
        settings = {"agents": {"ops_agent": args.ops_agent, "dcgm": args.dcgm, "instances": args.instances,
                               "interval_s": args.interval_s}}
    else:
        settings = {"jobs": [{"job_id": args.job_id, "replicas": args.replicas, "machine_type": args.machine_type}]}
    json.dump(configure(grpc_address, settings), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
