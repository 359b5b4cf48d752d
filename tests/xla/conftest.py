"""The XLA suite (``make test-xla``): the library's own functions on torch_xla's device.

It runs in an environment of its own (torch_xla needs its torch, not the project's): on XLA's CPU
device unless ``PJRT_DEVICE`` says otherwise, so CI checks the TPU path without a TPU. Where
torch_xla is not installed (``make test``) every test here is skipped.
"""

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")  # before torch_xla is imported
