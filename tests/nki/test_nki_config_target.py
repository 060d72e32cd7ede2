"""The hardware the NKI front-end traces against is the loaded config, typed (issue 37 item 6): every value comes
from the config's leaves through one table (``_trace.TARGET_KEYS``) with its type; a key that is missing or not of
its type is an error naming the key, never a default."""
import pytest

import trnsim
import trnsim.nki
from trnsim import _C
from trnsim.nki import _trace


@pytest.mark.parametrize("config, overrides", [
    ("trn1", []), ("trn2", []), ("trn3", []),
    ("trn2", ["core.tensor.max_moving_free_size_by_psum_dtype.fp32=256", "core.dma.transpose_supported=false",
              "core.dma.hardware_dge_per_core=0"])])
def test_target_is_the_loaded_config(config, overrides):
    leaves = _C.config_leaves(config, overrides)
    target = _trace.Target(config, overrides)
    for attribute, (key, kind) in _trace.TARGET_KEYS.items():
        value = getattr(target, attribute)
        assert type(value) is kind, (attribute, value)
        assert str(value).lower() == leaves[key] or value == float(leaves[key]), (attribute, value, leaves[key])
    assert target.hardware_dge is (target.hardware_dge_count > 0)


# Keys that the old Target read with an invented default (512, 1, 0, false) when they were absent.
DEFAULTED = ["core.tensor.max_moving_free_size_by_psum_dtype.fp32", "chip.physical_cores",
             "core.dma.transpose_supported", "core.dma.hardware_dge_per_core", "chip.default_logical_core_size"]


@pytest.mark.parametrize("key", DEFAULTED + ["core.sbuf.partitions", "hbm.bandwidth_gbps", "generation"])
def test_a_missing_key_is_an_error_naming_it(key):
    leaves = dict(_C.config_leaves("trn2", []))
    del leaves[key]
    with pytest.raises(trnsim.nki.KernelError, match=rf"key '{key}' is missing.*\[config-key\]"):
        _trace.Target("trn2", [], leaves)


@pytest.mark.parametrize("key, text", [("core.sbuf.partitions", "128.5"), ("core.dma.transpose_supported", "yes"),
                                       ("hbm.bandwidth_gbps", "fast"), ("chip.physical_cores", "")])
def test_a_malformed_key_is_an_error_naming_it(key, text):
    leaves = dict(_C.config_leaves("trn2", []))
    leaves[key] = text
    with pytest.raises(trnsim.nki.KernelError, match=rf"key '{key}' = '{text}' is not a .*\[config-key\]"):
        _trace.Target("trn2", [], leaves)
