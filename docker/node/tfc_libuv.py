"""Testbed only: lets torchrun work with Debian's python3-torch.

Debian builds torch (2.4 on: trixie, forky) without libuv, but TCPStore() asks
for libuv unless told otherwise, and only init_process_group's env://
rendezvous reads USE_LIBUV; torchrun's rendezvous stores (static and c10d)
and the workers' store client do not, so every torchrun fails with "use_libuv
was requested but PyTorch was built without libuv support". With USE_LIBUV=0
(the image sets it), this makes TCPStore's default use_libuv=False wherever
torch.distributed's modules name it, as soon as torch.distributed is imported. PyPI's torch is built with libuv and
needs none of this. Loaded by tfc-libuv.pth in the system site-packages.
"""

import os
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import PathFinder


class _Finder(MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.distributed" or os.environ.get("USE_LIBUV", "1") != "0":
            return None
        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            base = getattr(module, "TCPStore", None)
            if base is None:  # torch without distributed support
                return

            class TCPStore(base):
                def __init__(self, *args, **kwargs):
                    kwargs.setdefault("use_libuv", False)
                    super().__init__(*args, **kwargs)

            TCPStore.__qualname__ = base.__qualname__
            TCPStore.__module__ = base.__module__
            # The modules torch.distributed imported meanwhile hold the name
            # too; the ones imported later take it from torch.distributed.
            for name, mod in list(sys.modules.items()):
                if name.startswith("torch.distributed") and getattr(mod, "TCPStore", None) is base:
                    mod.TCPStore = TCPStore

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _Finder())
