"""`python -m bench`: run every benchmark in this folder and print its figures."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

# Run on their own (a make target each): seeding a million jobs and twenty million events of
# history takes far longer than every other benchmark together.
ON_THEIR_OWN = {"bench_retention"}


def main() -> None:
    here = Path(__file__).parent
    for module in sorted(m.name for m in pkgutil.iter_modules([str(here)])):
        if module.startswith("bench_") and module not in ON_THEIR_OWN:
            importlib.import_module(f"bench.{module}").main()
    print(f"not run here: {', '.join(sorted(ON_THEIR_OWN))} (make bench-retention)")


if __name__ == "__main__":
    main()
