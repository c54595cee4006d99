"""The bundled GPT trainer that gcpgpu jobs run: `python -m gcpgpu.trainer` or under torchrun.

Importing this package is cheap: torch is only imported by the modules that train.
"""
