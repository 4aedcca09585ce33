"""``certify``: from a base model and labelled data to a certificate for the model it trains
(:mod:`.pipeline`); its settings are :class:`.config.CertifyConfig`. The names below are
imported on first use (PEP 562), so that reading the settings' declarations loads no torch."""

from .._lazy import lazy_names

_WHERE = {"CertifyConfig": "config", "CertifyResult": "pipeline", "certify": "pipeline",
          "TrainSpec": "train", "train_classifier": "train", "HoldoutConfig": "config",
          "holdout": "holdout", "HoldoutResult": "holdout"}
__all__ = sorted(_WHERE)


__getattr__ = lazy_names(__name__, globals(), _WHERE)
