"""disagg-tui web: the console in a browser (watch-only gate, the server, headless Chromium)."""
