"""The UI-free core: it measures, launches, benchmarks, matches and records. It never imports Textual."""
