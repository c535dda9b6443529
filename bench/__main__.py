"""`python -m bench`: run every benchmark in this folder and print its figures."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path


def main() -> None:
    here = Path(__file__).parent
    for module in sorted(m.name for m in pkgutil.iter_modules([str(here)])):
        if module.startswith("bench_"):
            importlib.import_module(f"bench.{module}").main()


if __name__ == "__main__":
    main()
