from __future__ import annotations

import logging

import pytest

import compile_api


def test_config_defaults_match_torch_compile() -> None:
    c = compile_api.Config()
    assert c.cache_size_limit == 8
    assert c.suppress_errors is True
    assert c.debug is False


def test_every_config_field_has_an_environment_override() -> None:
    fields = [a.name for a in compile_api.Config.__attrs_attrs__]
    env = {}
    for name in fields:
        var = compile_api.Config.env_var(name)
        assert var.startswith("STRATA_")
        env[var] = {"cache_size_limit": "3", "debug_function": "f"}.get(name, "1")
    c = compile_api.Config()
    c.load_env(env)
    assert c.cache_size_limit == 3
    assert c.debug is True and c.verbose is True
    assert c.debug_function == "f"


def test_bad_environment_value_names_the_variable() -> None:
    c = compile_api.Config()
    with pytest.raises(ValueError, match="STRATA_SUPPRESS_ERRORS"):
        c.load_env({"STRATA_SUPPRESS_ERRORS": "maybe"})


def test_set_logs_turns_channels_on_and_off() -> None:
    compile_api.set_logs(recompiles=True)
    assert logging.getLogger("strata.recompiles").isEnabledFor(logging.DEBUG)
    compile_api.set_logs(recompiles=False)
    assert not logging.getLogger("strata.recompiles").isEnabledFor(logging.DEBUG)


def test_strata_logs_environment_variable() -> None:
    from compile_api import logs

    logs.load_env({"STRATA_LOGS": "graph_breaks, guards"})
    try:
        assert logging.getLogger("strata.graph_breaks").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("strata.guards").isEnabledFor(logging.DEBUG)
    finally:
        compile_api.set_logs(graph_breaks=False, guards=False)
    # An unknown name warns (once) and is ignored: never an error at import.
    with pytest.warns(UserWarning, match="'nope'"):
        logs.load_env({"STRATA_LOGS": "nope"})
