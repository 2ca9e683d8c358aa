"""The apps ``python -m bench peers`` serves: pyvia's and each peer's, written for the benchmark.

Every app renders the same content (``content.py``) with its own framework's idiom, so each page
has the same words and about the same size; see each file's docstring for what it mirrors.
"""
