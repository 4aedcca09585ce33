"""The duplicate-row policy of ``certify`` (the ``duplicates`` option, :data:`POLICIES`).

Two rows are *the same row* when the model reads them alike: the same token ids within the
first ``max_length`` and the same class (:func:`.preflight.row_keys`, the digest the pre-flight
check compares; this module never loosens it).

* ``refuse`` (the default): a row of DATA that repeats an earlier one, or a held-out row that is
  a row of DATA, stops the run before anything slow (:func:`.preflight.check_rows`; the
  message names this option).
* ``drop``: before the split, :func:`keep_distinct` keeps one copy of each row of DATA (which
  copy: a permutation seeded by ``seed``; copies differ at most beyond ``max_length`` tokens)
  and :func:`keep_unseen` drops the held-out rows that are rows of DATA. The counts, the rule
  and what the certificate is then about go to ``split.json`` and ``report.json``
  (:func:`record`).

What is certified (docs/guide/repeated-rows.md): with ``drop``, the rows certify reads are the
distinct rows, so every certificate is about the distribution those distinct rows are drawn
from (each distinct row counted once, however often the source repeats it), and the held-out
rows, once DATA's rows are taken out, about that distribution outside DATA's rows.

Contract: pure functions of the keys and the seed (no file, no model); indices are sorted
positions in the input order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI's --help reads POLICIES
    import numpy as np

POLICIES = ("refuse", "drop")

CERTIFIES_DROPPED = (
    "the rows of DATA were deduplicated before the split (one copy of each row kept: the same "
    "tokens within max_length and the same label): every certificate is about the "
    "distribution of distinct rows (each distinct row once, however often the source repeats "
    "it), assumed to be what the kept rows are an i.i.d. sample of")
CERTIFIES_TEST_DROPPED = (
    "held-out rows that are rows of DATA were dropped: the test-set bound is about the "
    "held-out distribution outside DATA's rows")


def keep_distinct(keys: Sequence[bytes], seed: int) -> "np.ndarray":
    """Sorted indices of one copy of each distinct key: of each key's copies, the one that
    comes first in a permutation of the rows seeded by ``seed`` (a row without copies is
    always kept)."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(keys))
    chosen: dict[bytes, int] = {}
    for i in order.tolist():
        chosen.setdefault(keys[i], i)
    return np.sort(np.fromiter(chosen.values(), dtype=np.int64, count=len(chosen)))


def keep_unseen(keys: Sequence[bytes], seen: Sequence[bytes]) -> "np.ndarray":
    """Sorted indices of the rows whose key is not in ``seen`` (the held-out rows that are no
    row of DATA)."""
    import numpy as np

    known = set(seen)
    return np.asarray([i for i, k in enumerate(keys) if k not in known], dtype=np.int64)


def record(policy: str, rows: int, kept: int, test_rows: int | None = None,
           test_kept: int | None = None) -> dict[str, Any]:
    """What ``split.json`` and ``report.json`` say of the policy: the counts and, when rows
    were dropped, what the certificate is then about."""
    out: dict[str, Any] = {"policy": policy,
                           "data": {"rows": rows, "kept": kept, "dropped": rows - kept}}
    if test_rows is not None and test_kept is not None:
        out["test"] = {"rows": test_rows, "kept": test_kept, "dropped": test_rows - test_kept}
    about = []
    if rows > kept:
        about.append(CERTIFIES_DROPPED)
    if out.get("test", {}).get("dropped"):
        about.append(CERTIFIES_TEST_DROPPED)
    out["certifies"] = "; ".join(about) if about else (
        "no row was dropped: every certificate is about the distribution DATA's rows were "
        "drawn from")
    if policy == "drop":
        out["rule"] = ("one copy of each row of DATA, chosen by a permutation seeded by the "
                       "seed; held-out rows that are rows of DATA dropped")
    return out
