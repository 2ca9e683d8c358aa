"""One module per endpoint of the runtime: page, stream, action, assets, beacon."""
