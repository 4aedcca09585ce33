"""Compression bounds next to PAC-Bayes and norm bounds on one small Transformer (digits).

A one-block Transformer reads scikit-learn's 8×8 digits as 8 row tokens of 8 pixels and is
trained twice from the same seeded initialisation θ₀: on all its weights, and in a random
subspace θ = θ₀ + P·w (P Gaussian, seeded, d_int columns; Li et al. 2018 / Lotfi et al. 2022).
For each trained model the study measures, on the same training sample:

* the compression (Occam) bound: code length of the quantized weights (the delta θ − θ₀, or
  w), k-means levels chosen on a grid and paid in the code, the quantized model's training error
  and smoothed log-loss, then ``occam_kl`` / ``occam_catoni`` / ``occam_smoothed_nll_kl``;
* the PAC-Bayes bound ``pac_bayes_kl_gaussian_mc`` (posterior N(θ, σ²I), prior N(θ₀, σ²I), σ
  on the Dziugaite–Roy grid, Gibbs risk by Monte Carlo with its own confidence term);
* the norm-based ``edelman_cor45_rate`` (a rate with hidden constants 1, never a bound),

and the held-out test error of the float and the quantized model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from boundcalc.measure.compress.compression import compress
from boundcalc.measure.compress.options import CompressOptions
from boundcalc.measure.compress.quantizer import quantize
from boundcalc.measure.compress.record import Compression
from boundcalc.rounding import upper_text
from boundcalc.stats import Quantity, Stats
from .report import StudyReport

EDELMAN_GAMMA = 1.0  # margin of the Edelman rate, fixed before any run
DR_C, DR_B = 0.1, 100  # Dziugaite–Roy grid σ² = c·e^{−j/b} (formulas/pac_bayes.toml)


class DigitsTransformer(nn.Module):
    """Row tokens (8 × 8) → linear embedding + learned positions → one pre-LN block
    (multi-head attention, ReLU MLP) → mean pool → linear head over 10 classes."""

    def __init__(self, d: int = 16, heads: int = 2, ffn: int = 32, T: int = 8, d_in: int = 8):
        super().__init__()
        self.heads, self.d = heads, d
        self.embed = nn.Linear(d_in, d)
        self.pos = nn.Parameter(torch.randn(T, d) * 0.1)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ffn_in, self.ffn_out = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.pos
        B, T, d = h.shape
        hd = d // self.heads
        z = self.ln1(h)
        split = (lambda t: t.reshape(B, T, self.heads, hd).transpose(1, 2))
        q, k, v = split(self.q(z)), split(self.k(z)), split(self.v(z))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1)
        h = h + self.o((att @ v).transpose(1, 2).reshape(B, T, d))
        h = h + self.ffn_out(torch.relu(self.ffn_in(self.ln2(h))))
        return self.head(h.mean(1))


@dataclass
class StudyConfig:
    """Default: the quick run (about a minute on 2 cores); :meth:`full` the larger one."""

    n_train: int = 1000
    d_int: int = 100
    steps: int = 300
    lr: float = 0.01
    levels: tuple[int, ...] = (2, 4, 8, 16, 32)
    qat_steps: int = 100
    mc_draws: int = 50
    sigma_js: tuple[int, ...] = (300, 500, 700, 900)  # σ² = 0.1·e^{−j/100}
    seed: int = 0

    @classmethod
    def full(cls) -> "StudyConfig":
        return cls(n_train=1400, d_int=150, steps=800, qat_steps=300, mc_draws=200,
                   sigma_js=(200, 300, 400, 500, 600, 700, 800, 900, 1000))


def digits_split(n_train: int, seed: int) -> tuple[dict, dict]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    perm = np.random.default_rng(seed).permutation(len(y))
    X = torch.tensor(X[perm] / 16.0, dtype=torch.float32).reshape(-1, 8, 8)
    y = torch.tensor(y[perm])
    return ({"inputs": X[:n_train], "targets": y[:n_train]},
            {"inputs": X[n_train:], "targets": y[n_train:]})


def _flat(model: nn.Module) -> tuple[torch.Tensor, list[tuple[str, torch.Size]]]:
    names = [(k, p.shape) for k, p in model.named_parameters()]
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), names


def _unflat(vec: torch.Tensor, names) -> dict[str, torch.Tensor]:
    out, pos = {}, 0
    for k, shape in names:
        size = int(np.prod(shape))
        out[k] = vec[pos:pos + size].reshape(shape)
        pos += size
    return out


def train_full(model: nn.Module, train: dict, cfg: StudyConfig) -> nn.Module:
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for _ in range(cfg.steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(train["inputs"]), train["targets"]).backward()
        opt.step()
    return model.eval()


def projector(D: int, d_int: int, seed: int) -> torch.Tensor:
    """The seeded random subspace P (D × d_int, N(0, 1/d_int) entries), fixed before the data."""
    g = torch.Generator().manual_seed(10_000 + seed)
    return torch.randn(D, d_int, generator=g) / math.sqrt(d_int)


def train_subspace(base: nn.Module, train: dict, cfg: StudyConfig) -> torch.Tensor:
    theta0, names = _flat(base)
    P = projector(theta0.numel(), cfg.d_int, cfg.seed)
    w = torch.zeros(cfg.d_int, requires_grad=True)
    opt = torch.optim.Adam([w], lr=cfg.lr * 5)
    for _ in range(cfg.steps):
        opt.zero_grad()
        params = _unflat(theta0 + P @ w, names)
        logits = functional_call(base, params, (train["inputs"],))
        nn.functional.cross_entropy(logits, train["targets"]).backward()
        opt.step()
    return w.detach()


def finetune_codebook(vec: torch.Tensor, levels: int, loss_of, steps: int,
                      lr: float = 0.03) -> torch.Tensor:
    """Quantization-aware fine-tuning of the K level values with the level assignments fixed
    (as in Lotfi et al. 2022): returns a vector with at most K distinct values, each rounded
    to float16 like the stored codebook."""
    codes, cb = quantize(vec.double().numpy(), levels, "kmeans", 16)
    centres = torch.tensor(cb, dtype=torch.float32, requires_grad=True)
    idx = torch.from_numpy(codes)
    opt = torch.optim.Adam([centres], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss_of(centres[idx]).backward()
        opt.step()
    final = centres.detach().to(torch.float16).to(torch.float64)
    return final[idx]


def subspace_model(base: nn.Module, w: torch.Tensor, cfg: StudyConfig) -> nn.Module:
    theta0, names = _flat(base)
    P = projector(theta0.numel(), cfg.d_int, cfg.seed)
    m = DigitsTransformer()
    m.load_state_dict({**base.state_dict(), **_unflat(theta0 + P @ w.float(), names)})
    return m.eval()


def error(model: nn.Module, data: dict) -> float:
    with torch.no_grad():
        return float((model(data["inputs"]).argmax(1) != data["targets"]).double().mean())


def gibbs_error(model: nn.Module, data: dict, sigma: float, draws: int, seed: int) -> float:
    """Mean training error of ``draws`` models θ + u, u ∼ N(0, σ²I)."""
    g = torch.Generator().manual_seed(seed)
    theta, names = _flat(model)
    errs = []
    with torch.no_grad():
        for _ in range(draws):
            params = _unflat(theta + sigma * torch.randn(theta.shape, generator=g), names)
            logits = functional_call(model, params, (data["inputs"],))
            errs.append(float((logits.argmax(1) != data["targets"]).double().mean()))
    return float(np.mean(errs))


def value_path_norm(model: DigitsTransformer, data: dict) -> float:
    """C_norms for the Edelman rate (its exact form is unknown; this choice is stated in the
    report): B_X · ‖E‖₂ · ‖V‖₂‖O‖₂ · ‖F_in‖₂‖F_out‖₂ · ‖W_head‖₂."""
    s = (lambda lin: float(torch.linalg.matrix_norm(lin.weight.detach().double(), 2)))
    b_x = float(torch.linalg.vector_norm(data["inputs"].double(), dim=-1).max())
    return b_x * s(model.embed) * s(model.v) * s(model.o) * s(model.ffn_in) * s(model.ffn_out) \
        * s(model.head)


def margins(model: nn.Module, data: dict) -> np.ndarray:
    with torch.no_grad():
        z = model(data["inputs"]).double()
    y = data["targets"]
    true = z[torch.arange(len(y)), y]
    z[torch.arange(len(y)), y] = -torch.inf
    return (true - z.max(1).values).numpy()


def _res(r) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "label": r.label, "value": float(r.value),
            "is_bound": r.is_bound, "vacuous": r.vacuous,
            "delta_effective": r.to_json()["delta_effective"]}


def compression_bounds(comp: Compression, n: int, extra_bits: float, reg) -> dict[str, Any]:
    import boundcalc as bc

    bits = comp.code.total + extra_bits
    vals = {"code_bits": bits, "emp_risk": comp.error, "n": n}
    out = {"code_bits": bits, "levels": comp.levels, "quantized_train_error": comp.error,
           "float_train_error": comp.float_error, "changed": comp.changed,
           "occam_kl": _res(bc.compute("occam_kl", registry=reg, values=vals)),
           "occam_catoni": _res(bc.compute("occam_catoni", registry=reg, values=vals))}
    # the smoothed loss over the whole α grid, with the code length of the same quantized model
    # (extra bits included): α is chosen among the measured points and ln 8 is paid
    scalars = comp.scalars()
    scalars["code_bits"] = Quantity(bits, method=scalars["code_bits"].method
                                    + f" + {extra_bits:g} bit(s) for the parameterisation",
                                    note=scalars["code_bits"].note)
    scalars["n"] = Quantity(float(n))
    nll = bc.compute("occam_smoothed_nll_kl", Stats(scalars=scalars, curves=comp.curves()),
                     registry=reg)
    out["occam_smoothed_nll_kl"] = {**_res(nll), "alpha": nll.parameters["alpha"],
                                    "uniform_bits": math.log2(comp.vocab)}
    return out


def pac_bayes(model: nn.Module, init_state: dict, train: dict, cfg: StudyConfig, reg):
    import boundcalc as bc

    theta, _ = _flat(model)
    base = DigitsTransformer()
    base.load_state_dict(init_state)
    dist = float(torch.linalg.vector_norm((theta - _flat(base)[0]).double()))
    rows = []
    for j in cfg.sigma_js:
        sigma = math.sqrt(DR_C * math.exp(-j / DR_B))
        e_hat = gibbs_error(model, train, sigma, cfg.mc_draws, cfg.seed + j)
        r = bc.compute("pac_bayes_kl_gaussian_mc", registry=reg, params={"sigma": sigma},
                       values={"E_hat": e_hat, "k": cfg.mc_draws, "dist_init": dist,
                               "n": len(train["targets"]),
                               "delta_mc": 0.01 / len(cfg.sigma_js)})
        rows.append({"j": j, "sigma": sigma, "gibbs_error_mc": e_hat, **_res(r)})
    return {"dist_init": dist, "rows": rows, "best": min(rows, key=lambda r: r["value"])}


def edelman(model: DigitsTransformer, train: dict, reg) -> dict[str, Any]:
    import boundcalc as bc

    c = value_path_norm(model, train)
    emp = float(np.mean(margins(model, train) < EDELMAN_GAMMA))
    r = bc.compute("edelman_cor45_rate", registry=reg, params={"gamma": EDELMAN_GAMMA},
                   values={"emp_margin_risk": emp, "C_norms": c, "m": len(train["targets"]),
                           "T": 8})
    return {"C_norms": c, "emp_margin_risk": emp, **_res(r)}


def _best(cands: list[tuple[Compression, Any]]) -> tuple[Compression, Any]:
    return min(cands, key=lambda c: min(r["occam_kl"] for r in c[0].per_level
                                         if r["levels"] == c[0].levels))


def run_study(cfg: StudyConfig, out: Path, progress=print) -> dict[str, Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is many times faster on a shared CPU
    try:
        return _run(cfg, out, progress)
    finally:
        torch.set_num_threads(threads)


def _run(cfg: StudyConfig, out: Path, progress) -> dict[str, Any]:
    import boundcalc as bc

    reg = bc.load_registry()
    torch.manual_seed(cfg.seed)
    train, test = digits_split(cfg.n_train, cfg.seed)
    n = cfg.n_train
    base = DigitsTransformer()
    init_state = {k: v.clone() for k, v in base.state_dict().items()}
    theta0, names = _flat(base)
    n_params = theta0.numel()
    ce = nn.functional.cross_entropy

    progress("training all weights")
    full = DigitsTransformer()
    full.load_state_dict(init_state)
    train_full(full, train, cfg)
    progress(f"training in a {cfg.d_int}-dimensional random subspace")
    w = train_subspace(base, train, cfg)
    sub = subspace_model(base, w, cfg)
    P = projector(n_params, cfg.d_int, cfg.seed)

    def loss_sub(v: torch.Tensor) -> torch.Tensor:
        params = _unflat(theta0 + P @ v.float(), names)
        return ce(functional_call(base, params, (train["inputs"],)), train["targets"])

    def loss_full(v: torch.Tensor) -> torch.Tensor:
        params = _unflat(theta0 + v.float(), names)
        return ce(functional_call(base, params, (train["inputs"],)), train["targets"])

    def rebuild(t):
        return subspace_model(base, t["w"], cfg)

    def full_from(delta: torch.Tensor) -> nn.Module:
        m = DigitsTransformer()
        m.load_state_dict({**init_state, **_unflat(theta0 + delta.float(), names)})
        return m.eval()

    delta = _flat(full)[0] - theta0
    subs, fulls = [], []
    for k in cfg.levels:
        progress(f"{k} levels: codebook fine-tuning and coding")
        wk = finetune_codebook(w, k, loss_sub, cfg.qat_steps)
        subs.append((compress(sub, train, CompressOptions(quantizer="kmeans",
                                                          levels_grid=cfg.levels),
                              coded={"w": wk}, rebuild=rebuild), wk))
        dk = finetune_codebook(delta, k, loss_full, cfg.qat_steps)
        fulls.append((compress(full_from(dk), train, CompressOptions(
            select="delta", quantizer="kmeans", levels_grid=cfg.levels), init=init_state), dk))
    comp_sub, _ = _best(subs)
    comp_full, _ = _best(fulls)
    # one bit says which of the two parameterisations is reported
    results: dict[str, Any] = {"config": asdict(cfg), "n_train": n, "n_test": len(test["targets"]),
                               "n_params": n_params}
    for name, model, comp in (("full", full, comp_full), ("subspace", sub, comp_sub)):
        qmodel = _quantized(comp, full, init_state, sub, rebuild, fulls, subs, full_from)
        r = compression_bounds(comp, n, 1.0, reg)
        r["test_error_float"] = error(model, test)
        r["test_error_quantized"] = error(qmodel, test)
        r["train_error_float"] = error(model, train)
        progress(f"PAC-Bayes and norm bounds for the {name} model")
        r["pac_bayes"] = pac_bayes(model, init_state, train, cfg, reg)
        r["edelman"] = edelman(model, train, reg)
        results[name] = r
    write_report(results, out)
    return results


def _quantized(comp: Compression, full, init_state, sub, rebuild, fulls, subs, full_from):
    """The decoded model the code describes (re-quantized here from the coded vector)."""
    from boundcalc.measure.compress.coded import coded_vector, decoded_state

    if comp.select == "given":
        wk = next(v for c, v in subs if c is comp)
        codes, cb = quantize(wk.double().numpy(), comp.levels, comp.quantizer, comp.codebook_bits)
        return rebuild({"w": torch.from_numpy(cb[codes])})
    dk = next(v for c, v in fulls if c is comp)
    m = full_from(dk)
    vec, layout = coded_vector(m, init_state, "delta")
    codes, cb = quantize(vec, comp.levels, comp.quantizer, comp.codebook_bits)
    q = DigitsTransformer()
    q.load_state_dict({k: v.float() for k, v in
                       decoded_state(cb[codes], layout, init_state, "delta").items()})
    return q.eval()


def write_report(res: dict[str, Any], out: Path) -> Path:
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=2, default=float))
    rep = StudyReport("Compression, PAC-Bayes and norm bounds on a small Transformer (digits)",
                      out)
    rep.text(f"Data: scikit-learn digits, {res['n_train']} training / {res['n_test']} test "
             f"images, 8 row tokens of 8 pixels. Model: one-block Transformer, "
             f"{res['n_params']} parameters. δ = 0.05 for every bound.")
    rows = []
    for name in ("full", "subspace"):
        r = res[name]
        pb = r["pac_bayes"]["best"]
        rows.append([name, f"{r['code_bits']:.0f}", r["levels"],
                     f"{r['train_error_float']:.3f}", f"{r['quantized_train_error']:.3f}",
                     f"{r['test_error_float']:.3f}", f"{r['test_error_quantized']:.3f}",
                     upper_text(r["occam_kl"]["value"], 3),  # certified values: rounded up
                     upper_text(r["occam_catoni"]["value"], 3), upper_text(pb["value"], 3),
                     f"{r['edelman']['value']:.3g}"])
    rep.table(["model", "code bits", "levels", "train err", "quant. train err", "test err",
               "quant. test err", "Occam kl", "Occam Catoni", "PAC-Bayes kl (best σ)",
               "Edelman rate (C=1)"], rows)
    lines = []
    for name in ("full", "subspace"):
        r = res[name]
        v = r["occam_kl"]["value"]
        verdict = ("vacuous (≥ 1)" if v >= 1 else "non-vacuous: below 1"
                   + (" and below the 0.9 error of guessing among 10 classes" if v < 0.9
                      else ", but not below the 0.9 error of guessing among 10 classes"))
        nll = r["occam_smoothed_nll_kl"]
        lines.append(
            f"- **{name}**: compression bound {upper_text(v, 3)} on the 0-1 error of the "
            f"quantized model ({verdict}; "
            f"δ_eff = {r['occam_kl']['delta_effective']:.3g}), code {r['code_bits']:.0f} bits "
            f"incl. 1 bit for the choice of parameterisation; its test error is "
            f"{r['test_error_quantized']:.3f}. Smoothed log-loss bound "
            f"{upper_text(nll['value'], 3)} bits at α = {nll['alpha']:g} (uniform guessing: "
            f"{nll['uniform_bits']:.3f} bits). PAC-Bayes-kl (Gaussian, MC Gibbs risk): "
            f"{upper_text(r['pac_bayes']['best']['value'], 3)} at σ = "
            f"{r['pac_bayes']['best']['sigma']:.3g} "
            f"(‖θ − θ₀‖ = {r['pac_bayes']['dist_init']:.3g}). Edelman: a rate "
            f"({r['edelman']['value']:.3g} with hidden constants 1), not a bound.")
    rep.text("\n".join(lines))
    return rep.write()
