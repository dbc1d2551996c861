"""Generated gRPC stubs (built from ../proto by setup.py; not committed)."""
