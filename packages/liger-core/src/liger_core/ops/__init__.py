"""One module per op: its contract (signature + docstring), argument checks and reference."""
