"""The operator console (Textual): the only package that imports Textual."""
