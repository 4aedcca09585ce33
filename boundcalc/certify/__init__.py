"""``boundcalc certify``: a base model and labelled data in, a certificate for the model this
procedure trains out (see :mod:`boundcalc.certify.pipeline`)."""

from .pipeline import CertifyConfig, CertifyResult, certify
from .train import TrainSpec, train_classifier

__all__ = ["CertifyConfig", "CertifyResult", "TrainSpec", "certify", "train_classifier"]
