"""Special functions available to formula files: their SymPy faces (evaluation, LaTeX).

The numeric kernels behind them live in :mod:`.kernels` (no SymPy), and are re-exported here.
``kl_inv(q, c)`` is the upper inverse of the binary kl divergence, rounded outward.
"""

from __future__ import annotations

import sympy as sp

from .kernels import (kl_bernoulli, kl_inv_lower, kl_inv_upper,  # noqa: F401 - re-exported
                      var_ratio_div_float)


class _Binary(sp.Function):
    """A function of two arguments with a float kernel: evaluated to 17 digits by ``kernel``
    when both arguments are numbers (else left symbolic), printed as the LaTeX template
    ``latex_form`` with the two printed arguments. Each subclass states ``nargs = 2`` itself
    (SymPy reads it from the class's own namespace)."""

    kernel: staticmethod
    latex_form: str

    def _eval_evalf(self, prec):
        a, b = self.args
        if a.is_Number and b.is_Number:
            return sp.Float(self.kernel(float(a), float(b)), 17)._eval_evalf(prec)
        return None

    def _latex(self, printer):
        return self.latex_form % tuple(printer._print(a) for a in self.args)


class kl_inv(_Binary):  # noqa: N801  (SymPy naming convention for functions)
    """SymPy function ``kl_inv(q, c)``: upper inverse of the binary kl divergence."""

    nargs = 2
    kernel = staticmethod(kl_inv_upper)
    latex_form = r"\mathrm{kl}^{-1}\!\left(%s,\, %s\right)"


class kl(_Binary):  # noqa: N801
    """SymPy function ``kl(q, p)``: binary kl divergence."""

    nargs = 2
    kernel = staticmethod(kl_bernoulli)
    latex_form = r"\mathrm{kl}\!\left(%s \,\middle\|\, %s\right)"


class GridMin(sp.Function):  # noqa: N801
    """``GridMin(expr, p)``: minimum of ``expr`` over the declared grid of free parameter ``p``.

    It is how a formula says "choose p post hoc, separately for each matrix": inside a Sum over
    matrices the minimum is taken per matrix. The evaluator records the arg-min of every
    instance, and the union-bound cost of the grid, per instance.
    """

    nargs = 2

    def _latex(self, printer):
        body, p = self.args
        return r"\min_{%s \in \mathcal{P}_{%s}} %s" % (
            printer._print(p), printer._print(p), printer.parenthesize(body, 1000))


class Cases(sp.Function):  # noqa: N801
    """``Piecewise`` as written in formula files: ``Cases(v1, c1, v2, c2, ..., v_else)``.

    SymPy's own Piecewise is folded outwards through powers and products, which would move a
    condition on a grid parameter outside its ``GridMin``; this opaque form stays where it is
    written.
    """

    def _latex(self, printer):
        a = self.args
        rows = [r"%s & \text{if } %s" % (printer._print(a[i]), printer._print(a[i + 1]))
                for i in range(0, len(a) - 1, 2)]
        rows.append(r"%s & \text{otherwise}" % printer._print(a[-1]))
        return r"\begin{cases} %s \end{cases}" % r" \\ ".join(rows)


class var_ratio_div(sp.Function):  # noqa: N801
    """``var_ratio_div(a, b)`` = (a/b)² − 1 − ln((a/b)²): the variance part of a Gaussian KL.

    Evaluated without cancellation (see :func:`var_ratio_div_float`); always ≥ 0.
    """

    nargs = 2

    def fdiff(self, argindex=1):
        """∂/∂a = 2(a − b)(a + b)/(a·b²), ∂/∂b = 2(b − a)(b + a)/b³ (the differences kept as
        factors, so that a ≈ b loses no digit to cancellation)."""
        a, b = self.args
        if argindex == 1:
            return 2 * (a - b) * (a + b) / (a * b ** 2)
        if argindex == 2:
            return 2 * (b - a) * (b + a) / b ** 3
        raise sp.ArgumentIndexError(self, argindex)

    def _eval_evalf(self, prec):
        a, b = self.args
        if a.is_Number and b.is_Number:
            import mpmath

            with mpmath.workprec(prec + 64):
                x, y = mpmath.mpf(sp.Float(a, 30)._mpf_), mpmath.mpf(sp.Float(b, 30)._mpf_)
                t = (x - y) / y
                v = 2 * (t - mpmath.log1p(t)) + t * t
            return sp.Float(v, mpmath.libmp.prec_to_dps(prec))
        return None

    def _latex(self, printer):
        a, b = (printer._print(x) for x in self.args)
        r = r"\frac{{%s}^{2}}{{%s}^{2}}" % (a, b)  # braces: an indexed a may carry a superscript
        return r"\left(%s - 1 - \ln %s\right)" % (r, r)
