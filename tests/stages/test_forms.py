"""One cache for compiled forms (boundcalc/stages/forms.py): each form is built once per entry,
shared by every evaluation of it, written nowhere on the entry (it stays the declaration the
registry's disk cache encodes by its fields), and dropped with the entry."""

from __future__ import annotations

import copy
import dataclasses
import gc

import pytest

from boundcalc.optimize import optimize
from boundcalc.stages import forms
from boundcalc.stages.validate import ValidatedEntry

MC = {"emp_risk": 0.1, "KL": 10.0, "n": 1000}


def test_a_form_is_built_once_per_entry(registry):
    e = copy.copy(registry.get("mcallester"))
    calls = []
    assert forms.form(e, "x", lambda: calls.append(1) or "built") == "built"
    assert forms.form(e, "x", lambda: calls.append(1) or "again") == "built"
    assert calls == [1]
    other = copy.copy(e)
    assert forms.form(other, "x", lambda: "its own") == "its own"


def test_every_evaluation_shares_the_compiled_form(registry):
    e = registry.get("catoni")
    a, b = ValidatedEntry(e, MC), ValidatedEntry(e, {**MC, "KL": 20.0})
    assert a.compiled is b.compiled is forms.compiled_for(e)
    assert forms.gridmin_params(e) == ["C"] and forms.gridmin_params(registry.get("mcallester")) == []


def test_nothing_is_written_on_the_entry(registry):
    e = copy.deepcopy(registry.get("pac_bayes_lambda"))
    optimize(e, None, MC, sensitivity=True)  # compiled, derivative and batch forms
    assert set(vars(e)) == {f.name for f in dataclasses.fields(e)}


def test_the_forms_go_with_the_entry(registry):
    e = copy.copy(registry.get("mcallester"))
    forms.compiled_for(e)
    key = id(e)
    assert key in forms._FORMS
    del e
    gc.collect()
    assert key not in forms._FORMS
