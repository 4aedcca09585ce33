"""The data side: the trained model run over a data set.

Loading a task model and its data (:mod:`.hf`, :mod:`.dataset_io`), the plain pass
(:mod:`.data_pass`), the Monte Carlo Gibbs risk and curvature (:mod:`.curvature`,
:mod:`.hutchpp`), and the command's driver (:mod:`.task_measure`). May import
:mod:`boundcalc.measure.weights` and the base modules; never :mod:`boundcalc.measure.compress`.
"""
