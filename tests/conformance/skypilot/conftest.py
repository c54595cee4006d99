"""SkyPilot's GCP provisioner against the emulator, in its own venv (`make conformance-skypilot`).

SkyPilot 0.14.1 pins click<8.2, which gcpgpu's own tests cannot run under (they read CliRunner's
separate stderr), so it is not in the dev dependencies: `make conformance-skypilot` builds
`.venv-skypilot` from `tests/conformance/skypilot/requirements.txt` and runs this folder there, and
`make test` runs that target after the main suite. In the main venv the folder is not collected;
GCPGPU_REQUIRE_SKYPILOT=1 (set by the make target) turns a missing SkyPilot into a failure.
"""

from __future__ import annotations

import importlib.util
import os

if importlib.util.find_spec("sky") is None:
    if os.environ.get("GCPGPU_REQUIRE_SKYPILOT") == "1":
        raise RuntimeError("SkyPilot is not installed in this venv: run `make conformance-skypilot`")
    collect_ignore_glob = ["test_*.py"]
