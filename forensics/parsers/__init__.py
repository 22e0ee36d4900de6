"""Parsers: turn one source's bytes into typed events (no interpretation of the crash)."""
