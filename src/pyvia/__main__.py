"""``python -m pyvia`` is the ``pyvia`` command."""

from pyvia.cli import main

main()
