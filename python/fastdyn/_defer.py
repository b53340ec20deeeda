"""Enables fastdyn at the moment torch is first imported, without importing torch itself.

`fastdyn run script.py` loads this file by path (not through the fastdyn package, whose import
would import torch) and calls install(). Until the script imports torch there is nothing fastdyn
could compile, so until then no frame-evaluation hook is installed: a script that never imports
torch runs exactly as under plain `python`, at the same speed (installing any PEP 523 hook
costs CPython 3.11/3.12 its inlined Python-to-Python calls). Frames started after torch's import
completes are compiled as with fastdyn.enable() at start.
"""
import importlib.util
import sys


def _enable():
    # NB: through fastdyn.api, not the package: when the script's own `import fastdyn` is what
    # imported torch, the package is still partially initialised (at its `import torch` line) and
    # has no `enable` yet, while its submodule api imports fine (torch has executed by now).
    importlib.import_module("fastdyn.api").enable()


class _TorchImportWatcher:
    """A meta-path finder that answers nothing itself: for `torch` it asks the other finders for
    the spec and wraps its loader, so that fastdyn is enabled right after torch has executed."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _enable()

        spec.loader.exec_module = exec_module
        return spec


def install():
    if "torch" in sys.modules:
        _enable()
    else:
        sys.meta_path.insert(0, _TorchImportWatcher())
