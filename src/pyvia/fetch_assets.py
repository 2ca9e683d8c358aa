"""``python -m pyvia.fetch_assets [--force]``: fetch the Datastar bundle from PyPI (set-up step)."""

from __future__ import annotations

import sys

from pyvia.assets import BUNDLE_NAME, VENDOR_DIR, fetch


def main(argv: list[str]) -> None:
    target = VENDOR_DIR / BUNDLE_NAME
    if target.exists() and "--force" not in argv:
        print(f"Datastar bundle present: {target}")
    else:
        print(f"fetched {fetch()}")


if __name__ == "__main__":
    main(sys.argv[1:])
