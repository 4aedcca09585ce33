"""Reproductions of the source papers' studies at reduced scale (see examples/)."""
