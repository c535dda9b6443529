"""What both processes read about providers: which are offered, their prices (the catalogue,
and an operator's file over it), timeouts and limits, and `JOBSTREAM_PROVIDER_CONCURRENCY`'s
`name=N,name=N` parsed."""

from __future__ import annotations

from dataclasses import dataclass

from jobstream import prices
from jobstream.prices import Prices
from jobstream.settings.fields import one_of, setting

# The names a provider setting may take: a misspelled one stops start-up, naming the nearest.
PROVIDER_NAMES = ("simulated", "openai", "anthropic")

# Prices were settings before the price catalogue: one set now stops start-up rather than be
# ignored, since a price an operator set (0 for a local model) would silently be another one.
REMOVED: dict[str, str] = dict.fromkeys(
    (
        "JOBSTREAM_OPENAI_INPUT_USD_PER_MTOK",
        "JOBSTREAM_OPENAI_OUTPUT_USD_PER_MTOK",
        "JOBSTREAM_ANTHROPIC_INPUT_USD_PER_MTOK",
        "JOBSTREAM_ANTHROPIC_OUTPUT_USD_PER_MTOK",
        "JOBSTREAM_SIMULATED_USD_PER_MTOK",
    ),
    "is no longer read: prices come from the price catalogue (jobstream/prices.toml); set "
    "yours per model, or a provider's default, in a file named by JOBSTREAM_PRICES_FILE",
)


@dataclass(frozen=True)
class ProviderSettings:
    default_provider: str = setting(
        "JOBSTREAM_DEFAULT_PROVIDER", "simulated", "Provider used when a job names none."
    )
    simulated: bool = setting(
        "JOBSTREAM_SIMULATED",
        True,
        "Offer the simulated provider (tests, demos). Production sets false: a job naming it, "
        "or sending a `simulate` object, is then refused (422).",
    )
    simulated_max_s: float = setting(
        "JOBSTREAM_SIMULATED_MAX_S",
        300.0,
        "Longest a simulated attempt may be asked to last, seconds: its first-token delay plus "
        "its tokens at its rate, a fault's retry_after_s, and the timeout_s a `timeout` fault "
        "hangs for are each refused (422) above it.",
        minimum=0,
    )
    provider_concurrency: str = setting(
        "JOBSTREAM_PROVIDER_CONCURRENCY",
        "openai=16",
        "Most attempts running at once per provider, across every worker, as `name=N,name=N`; "
        "a provider not named has no limit. Give every worker the same value.",
    )
    openai_base_url: str = setting(
        "JOBSTREAM_OPENAI_BASE_URL", "https://api.openai.com/v1", "OpenAI-compatible API base URL."
    )
    openai_api_key: str = setting(
        "JOBSTREAM_OPENAI_API_KEY", "", "API key (never logged).", secret=True
    )
    openai_model: str = setting("JOBSTREAM_OPENAI_MODEL", "gpt-4o-mini", "Default model.")
    openai_connect_timeout_s: float = setting(
        "JOBSTREAM_OPENAI_CONNECT_TIMEOUT_S",
        10.0,
        "Seconds to open a connection to the provider (a failure here is safe to retry).",
        minimum=0.001,
    )
    openai_first_token_timeout_s: float = setting(
        "JOBSTREAM_OPENAI_FIRST_TOKEN_TIMEOUT_S",
        120.0,
        "Seconds from sending the request to the first text token (covers queueing and prefill).",
        minimum=0.001,
    )
    openai_idle_timeout_s: float = setting(
        "JOBSTREAM_OPENAI_IDLE_TIMEOUT_S",
        30.0,
        "Seconds of silence allowed between stream chunks once tokens flow.",
        minimum=0.001,
    )

    anthropic_base_url: str = setting(
        "JOBSTREAM_ANTHROPIC_BASE_URL", "https://api.anthropic.com", "Anthropic API base URL."
    )
    anthropic_api_key: str = setting(
        "JOBSTREAM_ANTHROPIC_API_KEY",
        "",
        "Anthropic API key (never logged). Without it the server refuses jobs naming the "
        "`anthropic` provider (422).",
        secret=True,
    )
    anthropic_model: str = setting(
        "JOBSTREAM_ANTHROPIC_MODEL", "claude-haiku-4-5", "Default Anthropic model."
    )
    anthropic_connect_timeout_s: float = setting(
        "JOBSTREAM_ANTHROPIC_CONNECT_TIMEOUT_S",
        10.0,
        "Seconds to open a connection to Anthropic (a failure here is safe to retry).",
        minimum=0.001,
    )
    anthropic_first_token_timeout_s: float = setting(
        "JOBSTREAM_ANTHROPIC_FIRST_TOKEN_TIMEOUT_S",
        120.0,
        "Seconds from sending the request to the first text token.",
        minimum=0.001,
    )
    anthropic_idle_timeout_s: float = setting(
        "JOBSTREAM_ANTHROPIC_IDLE_TIMEOUT_S",
        30.0,
        "Seconds of silence allowed between stream events once tokens flow.",
        minimum=0.001,
    )
    prices_file: str | None = setting(
        "JOBSTREAM_PRICES_FILE",
        None,
        "A TOML file of prices in the shipped catalogue's format (jobstream/prices.toml): its "
        "models replace or add to the catalogue's, its `default` prices what a provider's "
        "catalogue does not know. Give server and worker the same file.",
    )

    @property
    def prices(self) -> Prices:
        """The price catalogue every amount of money is computed from: the shipped one, with
        JOBSTREAM_PRICES_FILE's entries over it (checked with the settings; read once)."""
        return prices.load(self.prices_file)

    @property
    def provider_limits(self) -> dict[str, int]:
        """`provider_concurrency` parsed: the limit of each named provider."""
        return parse_provider_limits(self.provider_concurrency)


def problems(settings: ProviderSettings) -> list[str]:
    found = []
    if not settings.simulated and settings.default_provider == "simulated":
        found.append(
            "JOBSTREAM_DEFAULT_PROVIDER is simulated, which JOBSTREAM_SIMULATED=false switches "
            "off: name another provider"
        )
    if settings.default_provider not in PROVIDER_NAMES:
        found.append(
            f"JOBSTREAM_DEFAULT_PROVIDER={settings.default_provider!r}: "
            + one_of(settings.default_provider, PROVIDER_NAMES)
        )
    try:
        for name in parse_provider_limits(settings.provider_concurrency):
            if name not in PROVIDER_NAMES:
                found.append(
                    f"JOBSTREAM_PROVIDER_CONCURRENCY names {name!r}: "
                    + one_of(name, PROVIDER_NAMES)
                )
    except ValueError as exc:
        found.append(f"JOBSTREAM_PROVIDER_CONCURRENCY: {exc}")
    try:
        prices.load(settings.prices_file)  # a file that does not load stops start-up
    except prices.PricesError as exc:
        found.append(str(exc))
    return found


def parse_provider_limits(raw: str) -> dict[str, int]:
    """`"openai=16, vllm=4"` as `{"openai": 16, "vllm": 4}`; an empty string names none."""
    limits: dict[str, int] = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        name, sep, value = (piece.strip() for piece in part.partition("="))
        if not sep or not name:
            raise ValueError(f"expected name=N, got {part.strip()!r}")
        if name in limits:
            raise ValueError(f"{name!r} is named twice")
        try:
            limit = int(value)
        except ValueError:
            raise ValueError(f"{name}: expected a whole number, got {value!r}") from None
        if limit < 1:
            raise ValueError(f"{name}: the limit must be at least 1, got {limit}")
        limits[name] = limit
    return limits
