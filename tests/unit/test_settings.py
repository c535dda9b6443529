from __future__ import annotations

import pytest

from jobstream.settings import Settings, SettingsError


def test_reads_typed_values_from_the_environment() -> None:
    settings = Settings.from_env(
        {"JOBSTREAM_PORT": "9001", "JOBSTREAM_LEASE_S": "2.5", "JOBSTREAM_LOG_JSON": "false"}
    )
    assert (settings.port, settings.lease_s, settings.log_json) == (9001, 2.5, False)


def test_every_bad_value_is_named_in_one_error() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"JOBSTREAM_PORT": "eighty", "JOBSTREAM_LEASE_S": "-1"})
    message = str(caught.value)
    assert "JOBSTREAM_PORT='eighty'" in message
    assert "JOBSTREAM_LEASE_S='-1': must be at least 0.1" in message


def test_cross_field_rules_are_checked() -> None:
    with pytest.raises(SettingsError, match="POOL_MIN"):
        Settings.from_env({"JOBSTREAM_DB_POOL_MIN": "20", "JOBSTREAM_DB_POOL_MAX": "5"})
    with pytest.raises(SettingsError, match="DATABASE_URL"):
        Settings.from_env({"DATABASE_URL": "mysql://x"})


def test_a_direct_url_beside_the_pooler_takes_the_sessions() -> None:
    one = Settings.from_env({"DATABASE_URL": "postgresql://db/app"})
    assert (one.session_database_url, one.pooled) == ("postgresql://db/app", False)
    both = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://pgbouncer:6432/app",
            "JOBSTREAM_DIRECT_DATABASE_URL": "postgresql://db:5432/app",
        }
    )
    assert (both.session_database_url, both.pooled) == ("postgresql://db:5432/app", True)
    with pytest.raises(SettingsError, match="needs DATABASE_URL"):
        Settings.from_env({"JOBSTREAM_DIRECT_DATABASE_URL": "postgresql://db/app"})
    with pytest.raises(SettingsError, match="DIRECT_DATABASE_URL must start"):
        Settings.from_env(
            {"DATABASE_URL": "postgresql://db/app", "JOBSTREAM_DIRECT_DATABASE_URL": "x"}
        )


def test_secrets_stay_out_of_repr() -> None:
    settings = Settings.from_env(
        {"JOBSTREAM_OPENAI_API_KEY": "sk-very-secret", "JOBSTREAM_SECRET_KEY": "hmac-secret"}
    )
    assert settings.openai_api_key == "sk-very-secret"
    assert "sk-very-secret" not in repr(settings)
    assert "hmac-secret" not in repr(settings)


def test_describe_lists_every_variable() -> None:
    text = Settings.describe()
    assert "DATABASE_URL" in text and "JOBSTREAM_LEASE_S" in text


def test_connection_settings_default_to_a_derived_cap_and_a_head_deadline() -> None:
    defaults = Settings.from_env({})
    assert (defaults.max_connections, defaults.head_timeout_s, defaults.keep_alive_s) == (
        None,
        10.0,
        5,
    )
    set_ = Settings.from_env({"JOBSTREAM_MAX_CONNECTIONS": "500", "JOBSTREAM_HEAD_TIMEOUT_S": "2"})
    assert (set_.max_connections, set_.head_timeout_s) == (500, 2.0)
    with pytest.raises(SettingsError, match="JOBSTREAM_MAX_CONNECTIONS='0': must be at least 1"):
        Settings.from_env({"JOBSTREAM_MAX_CONNECTIONS": "0"})


def test_switching_the_simulator_off_needs_another_default_provider() -> None:
    with pytest.raises(SettingsError, match="JOBSTREAM_DEFAULT_PROVIDER is simulated"):
        Settings.from_env({"JOBSTREAM_SIMULATED": "false"})
    production = Settings.from_env(
        {"JOBSTREAM_SIMULATED": "false", "JOBSTREAM_DEFAULT_PROVIDER": "openai"}
    )
    assert (production.simulated, production.default_provider) == (False, "openai")


def test_a_misspelled_provider_stops_start_up_naming_the_nearest() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"JOBSTREAM_DEFAULT_PROVIDER": "opeanai"})
    assert "JOBSTREAM_DEFAULT_PROVIDER='opeanai': must be one of simulated, openai" in str(
        caught.value
    )
    assert "did you mean 'openai'?" in str(caught.value)
    with pytest.raises(SettingsError, match="names 'opeanai'"):
        Settings.from_env({"JOBSTREAM_PROVIDER_CONCURRENCY": "opeanai=4"})
    with pytest.raises(SettingsError, match="did you mean 'warning'"):
        Settings.from_env({"JOBSTREAM_LOG_LEVEL": "warn"})


def test_unknown_variables_are_warned_about_with_the_nearest_name() -> None:
    warnings = Settings.unknown_names(
        {"JOBSTREAM_DEFALT_PROVIDER": "openai", "JOBSTREAM_PORT": "1", "JOBSTREAM_URL": "x",
         "JOBSTREAM_ZZZ": "1", "HOME": "/"}
    )  # fmt: skip
    assert warnings == {
        "JOBSTREAM_DEFALT_PROVIDER": "JOBSTREAM_DEFALT_PROVIDER is not a setting "
        "(did you mean JOBSTREAM_DEFAULT_PROVIDER?); it is ignored",
        "JOBSTREAM_ZZZ": "JOBSTREAM_ZZZ is not a setting; it is ignored",
    }


def test_log_json_unset_means_decided_by_the_terminal() -> None:
    assert Settings.from_env({}).log_json is None


def test_the_tenants_share_of_the_fleet_is_a_share() -> None:
    assert Settings.from_env({}).tenant_max_share == 0.75
    assert Settings.from_env({"JOBSTREAM_TENANT_MAX_SHARE": "1"}).tenant_max_share == 1.0
    for refused in ("0", "-0.5", "1.5"):
        with pytest.raises(SettingsError, match="JOBSTREAM_TENANT_MAX_SHARE"):
            Settings.from_env({"JOBSTREAM_TENANT_MAX_SHARE": refused})
