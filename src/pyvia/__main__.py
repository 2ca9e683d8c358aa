"""``python -m pyvia`` is the ``pyvia`` command."""

from pyvia.cli import console_main

console_main()
