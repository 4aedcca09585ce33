"""Compression: quantize a model, count its code length, measure the quantized model's risk.

The top room of :mod:`boundcalc.measure`: it may import the data side, the weights side and the
base modules; none of them imports it.
"""
