"""An offline Google Cloud emulator that speaks the real wire formats (in the spirit of moto).

    with gcpgpu.fakes.mock_gcp() as gcp:        # in-process, on a free loopback port
        ...code that builds real Google clients...
        gcp.faults.stockout("us-central1-a", "a3-highgpu-8g")

`gcpgpu emulator start --port 8085` serves the same backends until stopped. The tool never imports
this package outside tests and that command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Faults
    from .server import Emulator, mock_gcp

__all__ = ["Emulator", "Faults", "mock_gcp"]


def __getattr__(name: str):
    # Lazy: importing the package (e.g. for the pytest plugin) should not start werkzeug or grpc.
    if name in ("Emulator", "mock_gcp"):
        from . import server

        return getattr(server, name)
    if name == "Faults":
        from .core import Faults

        return Faults
    raise AttributeError(name)
