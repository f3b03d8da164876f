"""Synthetic looks and painted defects: layouts rendered in photographic looks, defects painted on any golden image,
and a line camera's capture variation for training pairs."""
