"""Compression: quantize a model, count its code length, measure the quantized model's risk.

The top room of :mod:`boundcalc.measure`: it may import the data side, the weights side and the
base modules; none of them imports it. Its modules, lowest first: :mod:`.quantizer` (K levels and
the stored codebook), :mod:`.codelength` (the bits of the code), :mod:`.coded` (which weights are
coded, the decoded model, fingerprints), :mod:`.risk` (a model's risk and predictions on a
sample), :mod:`.record` (the result and its stats-file view), :mod:`.options` (the caller's
choices, checked), :mod:`.compression` (the measurement: :func:`.compression.compress` in memory,
:func:`.compression.add_compression` into a stats file, on the model and batches that
``measure --data`` loaded: :class:`.compression.CompressionStage`).
"""
