"""Expression layer: signed-log evaluation of SymPy trees and the special functions."""

from .functions import GridMin, kl, kl_bernoulli, kl_inv, kl_inv_upper

__all__ = ["GridMin", "kl", "kl_bernoulli", "kl_inv", "kl_inv_upper"]
