"""Statistics of the weights alone: spectra, norms, distances from the initialisation.

Reads a checkpoint (and, optionally, an input sample for the input norms); never runs the model
on data. Imports only the base modules of :mod:`boundcalc.measure`.
"""
