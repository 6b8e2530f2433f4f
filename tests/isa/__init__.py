"""Semantic tests of the nki.isa instructions, against references written from the NKI docs."""
