"""Core: types, config, boxes, io, devices, errors and shared constants. Imports nothing else of the package."""
