"""pytest plugin for nki-library's own suite on trnsim (loaded by tools/clients/nki_library/run.py after
``-p trnsim.nki``). The published snapshot leaves out two private helper modules its test framework imports at
load time (remote-host core locks, trace analysis), neither of which a simulation run calls: they are stood in
for here. Its orchestrator's simulation path reads an attribute only its compile path sets: given a default."""
import dataclasses
import enum
import sys
import types


class _LockStatus(enum.Enum):
    ALLOCATED, NO_CORES, DRAINING, ERROR, RELEASED, DRAINED, UNDRAINED, FLOCK_TIMEOUT = range(8)

    @property
    def exit_code(self):
        return self.value

    @classmethod
    def from_exit_code(cls, code):
        return cls(code)


@dataclasses.dataclass
class _LockResult:
    status: _LockStatus = _LockStatus.ERROR


def _stand_in(name, **attrs):
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__path__ = []
    sys.modules[name] = module


def pytest_load_initial_conftests(early_config, parser, args):
    # Looked up as files (importing `test` now could find the standard library's package of that name).
    utils = early_config.rootpath / "test" / "utils"
    if not (utils / "scripts" / "remote_lock_scripts.py").exists():
        _stand_in("test.utils.scripts")
        _stand_in("test.utils.scripts.remote_lock_scripts", LockStatus=_LockStatus, LockResult=_LockResult)
    if not (utils / "perf_analysis_private.py").exists():
        _stand_in("test.utils.perf_analysis_private", analyze_trace=lambda *a, **k: None)


def pytest_configure(config):
    orchestrator = sys.modules.get("test.utils.test_orchestrator")
    if orchestrator is not None and not hasattr(orchestrator.Orchestrator, "_compiled_kernel"):
        orchestrator.Orchestrator._compiled_kernel = None
