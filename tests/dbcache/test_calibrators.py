"""The node's calibrator choice, mapped onto cache-dit's own calibrator configs."""

import cache_dit
import pytest

from krea2_cachedit.adapters.dbcache.calibrators import (
    CALIBRATORS, calibrator_config, calibrator_summary, dmd_forecast_steps)
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings


def test_the_default_is_no_calibrator():
    assert DBCacheSettings().calibrator == "none" and calibrator_config(DBCacheSettings()) is None
    assert CALIBRATORS == ("none", "taylorseer", "foca", "dmd")


@pytest.mark.parametrize("settings, config_type, fields", [
    (DBCacheSettings(calibrator="taylorseer", taylorseer_order=3), cache_dit.TaylorSeerCalibratorConfig,
     {"calibrator_type": "taylorseer", "taylorseer_order": 3}),
    (DBCacheSettings(calibrator="foca"), cache_dit.FoCaCalibratorConfig, {"calibrator_type": "foca"}),
    (DBCacheSettings(calibrator="dmd", dmd_history=5), cache_dit.DMDCalibratorConfig,
     {"calibrator_type": "dmd", "dmd_history": 5}),
], ids=["taylorseer", "foca", "dmd"])
def test_each_calibrator_is_cache_dits_own_config(settings, config_type, fields):
    config = calibrator_config(settings)
    assert type(config) is config_type and config.enable_calibrator
    assert {key: getattr(config, key) for key in fields} == fields
    # What cache-dit builds from it (its factory, as a cache context does).
    from cache_dit.caching.cache_contexts.calibrators import Calibrator
    assert type(Calibrator(config)).__name__.lower().startswith(settings.calibrator)


@pytest.mark.parametrize("bad, message", [
    (dict(calibrator="taylor"), "calibrator must be one of"),
    (dict(calibrator="dmd", dmd_history=3), "dmd_history must be between 4 and 16"),
    (dict(dmd_history=17), "dmd_history must be between 4 and 16"),
    (dict(taylorseer_order=0), "taylorseer_order must be between 1 and 4"),
    (dict(taylorseer_order=5), "taylorseer_order must be between 1 and 4"),
])
def test_out_of_range_calibrator_settings_name_the_input(bad, message):
    with pytest.raises(ValueError, match=message):
        DBCacheSettings(**bad)


def test_the_summary_names_only_the_parameters_the_calibrator_reads():
    settings = {"calibrator": "none", "taylorseer_order": 2, "dmd_history": 6}
    assert calibrator_summary(settings, []) == {"name": "none"}
    assert calibrator_summary({**settings, "calibrator": "taylorseer"}, []) == {"name": "taylorseer",
                                                                             "taylorseer_order": 2}
    assert calibrator_summary({**settings, "calibrator": "foca"}, []) == {"name": "foca"}
    assert calibrator_summary({}, []) is None  # a run left uncached


def stream(steps, cached):
    return {"steps": list(steps), "cached_steps": list(cached)}


def test_dmd_forecasts_after_4_evenly_spaced_computed_steps():
    assert dmd_forecast_steps([stream(range(8), [4, 6])], 6) == [4]          # 0-3 computed, then 4
    assert dmd_forecast_steps([stream(range(8), [3, 5, 6])], 6) == []        # 0 1 2 | 4 | 7: never 4 even
    # 0-4 computed, then every other step: the spacing changes at 4, so 7 and 9 fall back, and by
    # 11 the computed 4 6 8 10 are evenly spaced again (with any window of at least 4).
    for history in (4, 6):
        assert dmd_forecast_steps([stream(range(14), [5, 7, 9, 11])], history) == [5, 11]
    # A step counts only when every stream that cached it had the fit.
    assert dmd_forecast_steps([stream(range(8), [4, 6]), stream(range(2, 8), [4, 6])], 6) == []
