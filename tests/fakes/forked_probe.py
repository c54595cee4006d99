"""Run by tests/fakes/test_runner_forked.py as a helper the emulator forks: says what process it finds
itself in, as JSON on stdout, then exits with the code given (or sleeps until killed when told to)."""

import json
import os
import signal
import sys

if __name__ == "__main__":
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0), "pgid": os.getpgid(0),
                      "cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv[1:], "stdin": sys.stdin.read(),
                      "preloaded": "google.cloud.compute_v1" in sys.modules}))
    print("a line on stderr", file=sys.stderr)
    if sys.argv[1] == "sleep":
        signal.pause()  # until the test kills it
    sys.exit(int(sys.argv[1]))
