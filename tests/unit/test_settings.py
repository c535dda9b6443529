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
