"""Corpus file formats, one module each: text (BERT text, JSON lines, JSON)."""
