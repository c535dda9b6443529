"""The price catalogue (jobstream/prices.py): how a model's price is found, what an operator's
file changes, and how a malformed file stops start-up."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from jobstream import prices
from jobstream.prices import Price, PricesError, least_certain
from jobstream.settings import PROVIDER_NAMES, Settings, SettingsError

SHIPPED = prices.load()


def operator_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    return path


def test_a_model_by_its_exact_name_has_its_list_price() -> None:
    price = SHIPPED.price_of("openai", "gpt-4o")
    assert price == Price(
        Decimal("2.50"), Decimal("10.00"), Decimal("1.25"), Decimal("2.50"), "catalogue", "gpt-4o"
    )


@pytest.mark.parametrize(
    ("provider", "asked", "found"),
    [
        ("openai", "gpt-4o-2024-08-06", "gpt-4o"),
        # The longer name wins over the shorter one it starts with.
        ("openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai", "gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"),
        ("openai", "GPT-4o", "gpt-4o"),
        ("anthropic", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic", "claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("anthropic", "claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("anthropic", "claude-haiku-4-5@20251001", "claude-haiku-4-5"),
        ("anthropic", "claude-opus-4-0", "claude-opus-4"),  # an alias
    ],
)
def test_a_dated_or_aliased_name_finds_its_model(provider: str, asked: str, found: str) -> None:
    price = SHIPPED.price_of(provider, asked)
    assert (price.source, price.model) == ("catalogue", found)
    assert price == SHIPPED.entries(provider)[found]


@pytest.mark.parametrize("asked", ["o3-pro", "gpt-4o-audio-preview", "fake-model", "gpt-4o-2024"])
def test_a_model_found_nowhere_costs_the_default_and_says_so(asked: str) -> None:
    # No looser prefix than a snapshot's date: o3-pro costs ten times o3.
    price = SHIPPED.price_of("openai", asked)
    assert (price.source, price.model) == ("default", None)
    assert price == SHIPPED.default("openai")
    assert price.input > 0 and price.output > 0


def test_the_catalogue_prices_every_provider_and_the_simulator_as_before() -> None:
    assert set(SHIPPED.providers) == set(PROVIDER_NAMES)
    simulated = SHIPPED.price_of("simulated", "simulated")
    assert (simulated.input, simulated.output) == (Decimal(0), Decimal(2))


def test_anthropics_cache_prices_are_its_multiples_of_the_input_price() -> None:
    for name, price in SHIPPED.entries("anthropic").items():
        if name == "claude-3-haiku":  # its list prices are its own: 0.30 and 0.03
            assert (price.cache_write, price.cache_read) == (Decimal("0.30"), Decimal("0.03"))
            continue
        assert price.cache_write == price.input * Decimal("1.25"), name
        assert price.cache_read == price.input * Decimal("0.1"), name
    # OpenAI charges nothing extra to write its cache; a read is the model's cached-input price.
    for name, price in SHIPPED.entries("openai").items():
        assert price.cache_write == price.input and price.cache_read < price.input, name


def test_cost_is_exact_decimal_arithmetic() -> None:
    price = SHIPPED.price_of("anthropic", "claude-sonnet-4-5")
    cost = price.cost(1_000, 200, cache_read_tokens=3, cache_write_tokens=7)
    # 1000 x 3 + 200 x 15 + 3 x 0.3 + 7 x 3.75, a millionth of it: no float's 0.30000000000000004.
    assert cost == Decimal("0.00602715")
    assert price.cost(0, 0) == 0


def test_an_attempt_records_its_least_certain_price() -> None:
    assert least_certain(["catalogue", "default", "operator"]) == "default"
    assert least_certain(["catalogue", None, "operator"]) == "operator"
    assert least_certain(["catalogue"]) == "catalogue"
    assert least_certain([None]) is None and least_certain([]) is None


def test_an_operators_file_replaces_and_adds_models_and_the_default(tmp_path: Path) -> None:
    path = operator_file(
        tmp_path,
        """
        [openai]
        default = { input = 0, output = 0 }

        [openai.models]
        "gpt-4o" = { input = 2, cache_read = 1, output = 9 }
        "llama3.2" = { input = 0, output = 0, aliases = ["local"] }

        [anthropic.models]
        "claude-opus-4" = { input = 10, output = 50 }
        """,
    )
    loaded = prices.load(path)
    assert loaded.price_of("openai", "gpt-4o-2024-08-06") == Price(
        Decimal(2), Decimal(9), Decimal(1), Decimal(2), "operator", "gpt-4o"
    )
    assert loaded.price_of("openai", "LOCAL") == loaded.price_of("openai", "llama3.2")
    assert loaded.price_of("openai", "llama3.2").source == "operator"
    # The default is the operator's, and still says the model was found nowhere.
    unknown = loaded.price_of("openai", "mistral")
    assert (unknown.source, unknown.input, unknown.output) == ("default", Decimal(0), Decimal(0))
    # An entry without cache prices takes its section's multiples; the shipped alias follows it.
    opus = loaded.price_of("anthropic", "claude-opus-4-0")
    assert (opus.source, opus.model) == ("operator", "claude-opus-4")
    assert (opus.cache_write, opus.cache_read) == (Decimal("12.50"), Decimal("1.0"))
    # What the file does not name is the catalogue's, and the shipped catalogue is unchanged.
    assert loaded.price_of("openai", "gpt-4.1") == SHIPPED.price_of("openai", "gpt-4.1")
    assert SHIPPED.price_of("openai", "gpt-4o").source == "catalogue"


def test_the_example_for_local_models_makes_them_free() -> None:
    loaded = prices.load(Path(__file__).parents[2] / "examples" / "local-prices.toml")
    local = loaded.price_of("openai", "llama3.2")
    assert (local.source, local.cost(1_000, 1_000)) == ("default", Decimal(0))
    assert loaded.price_of("openai", "gpt-4o") == SHIPPED.price_of("openai", "gpt-4o")


def test_a_rewritten_file_is_read_again(tmp_path: Path) -> None:
    path = operator_file(tmp_path, '[openai.models]\n"x" = { input = 1, output = 1 }\n')
    assert prices.load(path).price_of("openai", "x").output == 1
    path.write_text('[openai.models]\n"x" = { input = 1, output = 12 }\n')
    assert prices.load(path).price_of("openai", "x").output == 12


MODELS = "[openai.models]\n"
ENTRY = '[openai.models."gpt-x"]'


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[openai.models\n", "not valid TOML"),
        (MODELS + '"gpt-x" = { input = "cheap", output = 1 }', f"{ENTRY} input: expected a number"),
        (MODELS + '"gpt-x" = { input = -1, output = 1 }', f"{ENTRY} input: must be"),
        (MODELS + '"gpt-x" = { input = 1 }', f"{ENTRY}: output is missing"),
        (MODELS + '"gpt-x" = { input = 1, output = 1, cached = 1 }', f"{ENTRY} cached: not a key"),
        (MODELS + '"gpt-x" = 1.5', f"{ENTRY}: expected a table"),
        ('[opnai.models]\n"gpt-x" = { input = 1, output = 1 }', "[opnai] is not a provider"),
        ("[openai]\ndefualt = { input = 1, output = 1 }", "[openai] defualt: not a key"),
        (MODELS + '"A" = { input = 1, output = 1 }\n"a" = { input = 2, output = 2 }', "is also"),
        (
            MODELS + '"mine" = { input = 1, output = 1, aliases = ["gpt-4o"] }',
            "'gpt-4o' is a model of its own",
        ),
        ("[openai]\ncache_read_of_input = true", "[openai] cache_read_of_input: expected a number"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_file_and_the_entry(
    tmp_path: Path, text: str, named: str
) -> None:
    path = operator_file(tmp_path, text)
    with pytest.raises(PricesError) as caught:
        prices.load(path)
    assert str(caught.value).startswith(f"JOBSTREAM_PRICES_FILE {path}: ")
    assert named in str(caught.value)


def test_a_bad_or_missing_file_stops_start_up_with_the_settings(tmp_path: Path) -> None:
    path = operator_file(tmp_path, '[openai.models]\n"gpt-x" = { input = 1 }\n')
    with pytest.raises(SettingsError, match=r'prices.toml: \[openai.models."gpt-x"\]: output'):
        Settings.from_env({"JOBSTREAM_PRICES_FILE": str(path)})
    with pytest.raises(SettingsError, match=r"nowhere\.toml: cannot be read"):
        Settings.from_env({"JOBSTREAM_PRICES_FILE": str(tmp_path / "nowhere.toml")})
    path.write_text('[openai.models]\n"gpt-x" = { input = 1, output = 3 }\n')
    settings = Settings.from_env({"JOBSTREAM_PRICES_FILE": str(path)})
    assert settings.prices.price_of("openai", "gpt-x").output == 3


def test_a_price_setting_of_before_the_catalogue_stops_start_up() -> None:
    # Ignored, it would let a price an operator set (0 for a local model) become another one.
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"JOBSTREAM_OPENAI_INPUT_USD_PER_MTOK": "0"})
    assert "JOBSTREAM_OPENAI_INPUT_USD_PER_MTOK is no longer read" in str(caught.value)
    assert "JOBSTREAM_PRICES_FILE" in str(caught.value)
