"""Helpers of the reliability tests (imported as ``tests.reliability._rel_helpers``)."""

from __future__ import annotations

TUNE_TEXTS = ["red blue", "green tree", "a b c", "more words here", "the end", "final row"]
TUNE_LABELS = [0, 1, 2, 0, 1, 2]


def one_line_error(res, code: int) -> str:
    """The single ``error:`` line of a refused CLI run with exit ``code``."""
    assert res.exit_code == code, (res.exit_code, res.output[-1500:])
    err = res.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in res.output, err
    return err


MEASURE = ["--text-column", "sentence", "--sigma", "0.01", "--draws", "2", "--tune-draws", "1",
           "--hessian-probes", "0"]
