"""google.cloud.compute_v1, one service at a time.

The package's own __init__ imports every one of its ~100 service clients (each with its pagers and
REST transport): about 1.5 s of a command that uses three of them. So the package is registered here
without running that __init__, and a client comes from its own module,
google.cloud.compute_v1.services.<snake_name>; messages come from google.cloud.compute_v1.types.
Code elsewhere in the same process that reads `compute_v1.SomeName` still gets the whole package:
the first such read runs the real __init__ once.
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
from types import ModuleType
from typing import Any

_PACKAGE = "google.cloud.compute_v1"
_lock = threading.Lock()
_init_lock = threading.RLock()  # reentrant: the __init__ it guards may read the package's names


def _register_package() -> None:
    """Put google.cloud.compute_v1 in sys.modules without running its __init__ (once per process)."""
    with _lock:
        if _PACKAGE in sys.modules:
            return
        import importlib.util

        import google.cloud

        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or spec.loader is None:  # pragma: no cover - the library is a dependency
            raise ImportError(f"no module named {_PACKAGE!r}")
        package = importlib.util.module_from_spec(spec)  # __path__ set: its submodules import alone
        ran = False

        def __getattr__(name: str) -> Any:
            # A class the package's __init__ would have defined (compute_v1.InstancesClient): run it, once.
            # Lowercase names are submodules (`from google.cloud.compute_v1 import gapic_version`), which
            # the import system loads itself when this says there is no such attribute yet.
            nonlocal ran
            if name[:1].isupper():
                with _init_lock:  # another thread reading a name meanwhile waits for the whole package
                    if not ran:
                        ran = True
                        spec.loader.exec_module(package)
                if name in package.__dict__:
                    return package.__dict__[name]
            raise AttributeError(f"module {_PACKAGE!r} has no attribute {name!r}")

        package.__getattr__ = __getattr__  # type: ignore[attr-defined]
        sys.modules[_PACKAGE] = package
        google.cloud.compute_v1 = package  # type: ignore[attr-defined]  # as an import would bind it


def compute_types() -> ModuleType:
    """google.cloud.compute_v1.types: every Compute message (Instance, Metadata, ...Request)."""
    _register_package()
    return importlib.import_module(f"{_PACKAGE}.types")


def _snake(client_name: str) -> str:
    """"RegionInstanceGroupManagersClient" -> "region_instance_group_managers" (the service's module)."""
    base = client_name.removesuffix("Client")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


def client_class(name: str) -> type:
    """A compute_v1 client class by name, e.g. client_class("InstancesClient"), importing that service only."""
    if not name.endswith("Client"):
        raise ValueError(f"not a compute_v1 client class name: {name!r}")
    _register_package()
    return getattr(importlib.import_module(f"{_PACKAGE}.services.{_snake(name)}"), name)
