"""The pyvia website: the docs and a gallery of live examples, served by pyvia itself."""
