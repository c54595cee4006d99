"""A replica the emulator starts outside any sandbox (the bundled trainer) never takes a job's variables that
load code from where they point (issue 36): PYTHONPATH to a planted sitecustomize.py, LD_PRELOAD, and the like.
The job's other variables reach it as they are."""

from __future__ import annotations

import json
import sys

from gcpgpu.fakes.host.runner import ReplicaSpec, Runner

SHOW = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('FOO', 'PYTHONUNBUFFERED', 'LD_PRELOAD')}))"


def test_a_jobs_code_loading_variables_are_left_out_of_an_unsandboxed_replica(tmp_path):
    planted = tmp_path / "bucket"
    planted.mkdir()
    marker = tmp_path / "ran-planted-code"
    (planted / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    env = {"PYTHONPATH": str(planted), "LD_PRELOAD": str(planted / "evil.so"), "PYTHONSTARTUP": str(planted),
           "TORCHINDUCTOR_CACHE_DIR": str(planted), "FOO": "bar", "PYTHONUNBUFFERED": "1"}
    runner = Runner(root=tmp_path / "runs")
    try:
        run = runner.start("job-1", [ReplicaSpec("node-0", [sys.executable, "-c", SHOW], env)])
        assert run.wait(60) and run.state == "succeeded", [line.text for line in run.log_lines()]
        lines = [line.text for line in run.log_lines()]
        assert json.loads(next(t for t in lines if t.startswith("{"))) == \
            {"FOO": "bar", "PYTHONUNBUFFERED": "1", "LD_PRELOAD": None}
        assert ("gcpgpu emulator: LD_PRELOAD, PYTHONPATH, PYTHONSTARTUP, TORCHINDUCTOR_CACHE_DIR left out of the "
                "job's environment: this process runs outside any sandbox, where they would load code from where "
                "they point") in lines
        assert not marker.exists()
    finally:
        runner.reset()
