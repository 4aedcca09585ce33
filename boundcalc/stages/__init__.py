"""The stages of evaluating one registry entry at concrete values, each with its contract.

(``boundcalc.evaluate`` is the one-call function; this package holds its stages.)

1. :mod:`.validate`: values → :class:`~.validate.ValidatedEntry`. Every symbol has a value
   inside its domain, index sizes agree, grids are built, the memory budget holds, hand-set
   GridMin parameters are pinned (on their grid and charged, unless declared fixed). It
   evaluates the expression at a point in floats as a :class:`~.float_eval.FloatEvaluator`
   (:mod:`.float_eval`, the evaluator every later stage calls), on the forms compiled once
   per entry (:mod:`.forms`, one cache).
2. :mod:`.choose`: the scalar free parameters → values, how each was chosen, union-bound costs
   (given, default, or closed form → best admissible grid/prior point). The optimizer
   (:mod:`boundcalc.optimize.core`) starts from and snaps to the same rules.
3. :mod:`.enclose`: at the chosen point, the outward-rounded interval value (never below the
   formula's exact value), the exact SymPy value (a check), the output-range check and the
   assumptions' status.
4. Annotate: :mod:`boundcalc.floor` (zero-complexity floor, what dominates), called by
   :meth:`boundcalc.evaluation.Prepared.result`, which runs the stages in order.
"""
