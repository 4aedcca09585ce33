"""Lintilhac & Shaikh's Fourier-sparse Boolean targets: targets, the Appendix-B construction,
learned two-layer Transformers, and the sharpness/norm quantities of Theorem 2.

References: sharper_picture.md §1.2 (target class), §1.3 (construction), §2.1 (domination),
§3.1 (tr ∇²L̂ = 2‖∇f‖² at zero loss), §6 (Appendix A numerics, P̂, Σ̂).

* :class:`FourierTarget` ``f(x) = Σ_t c_t χ_{S_t}(x)`` with even-parity indicators
  ``χ_S(x) = ½(1 + (−1)^{Σ_{i∈S} x_i})``, ``|S_t| = D_f``, ``c = |g|/‖g‖₂``.
* :class:`Construction` the hard-coded "1.5-layer" Transformer of §1.3 without JL projection
  (as E.3 does): Attn-1 positional (logit 2 ln T on the members of S_t, −40 elsewhere for the
  representative row t < ω, 0 = uniform for the other rows), a trapezoidal-wave ReLU MLP equal
  to ``g(z) = 1[D_f z even]`` on the grid ``z ∈ {0, 1/D_f, …, 1}`` with flat plateaus of half-width
  ``1/(4D_f)`` and a residual, Attn-2 from the output position with logits ``ln c_t + 2 ln T`` on
  the representatives and −40 elsewhere, and a readout scaled by ``Z = Σ c_t``.
  Deviation (documented): a residual connection is kept after Attn-1, as in the authors'
  ``hardcoded_transformer.py``; without a JL projection the positional channels must reach Attn-2.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from boundcalc.errors import BoundcalcError, DomainError
from .tiny_transformers import BooleanTransformer, count_parameters, parameter_norm

MASK = -40.0           # [C]: logit of non-members / non-representatives
PLATEAU = 0.25         # plateau half-width of the MLP, in units of the grid step 1/D_f
SIGMA_MESH = np.linspace(0.01, 0.00001, 20)  # [C] the paper's σ mesh


# ---------------------------------------------------------------------------------------------
# targets
# ---------------------------------------------------------------------------------------------

@dataclass
class FourierTarget:
    """``f(x) = Σ_t c_t · 1[Σ_{i∈S_t} x_i even]`` on ``x ∈ {0,1}^T``."""

    T: int
    sets: list[tuple[int, ...]]
    coeffs: np.ndarray

    @property
    def degree(self) -> int:
        return max(len(S) for S in self.sets)

    @property
    def sparsity(self) -> int:
        return len(self.sets)

    def __call__(self, bits: np.ndarray) -> np.ndarray:
        bits = np.asarray(bits)
        even = np.stack([(bits[:, list(S)].sum(1) % 2 == 0) for S in self.sets], axis=1)
        return even.astype(np.float64) @ self.coeffs

    def terms(self) -> dict[tuple[int, ...], float]:
        return {tuple(S): float(c) for S, c in zip(self.sets, self.coeffs)}


def random_target(T: int, degree: int, sparsity: int, rng: np.random.Generator) -> FourierTarget:
    """ω distinct uniformly random D_f-subsets of range(T), coefficients c = |g|/‖g‖₂, g ~ N(0, I)."""
    if not 1 <= degree <= T:
        raise DomainError(f"target: degree D_f={degree} must lie in [1, T={T}]")
    if not 1 <= sparsity <= T:
        raise DomainError(f"target: sparsity ω={sparsity} must lie in [1, T={T}] (Theorem 2 needs ω ≤ T)")
    if sparsity > math.comb(T, degree):
        raise DomainError(f"target: only C({T},{degree}) = {math.comb(T, degree)} sets of size "
                          f"{degree}, fewer than ω={sparsity}")
    if math.comb(T, degree) <= 50_000:
        combos = list(itertools.combinations(range(T), degree))
        sets = [combos[i] for i in rng.choice(len(combos), sparsity, replace=False)]
    else:
        chosen: set[tuple[int, ...]] = set()
        while len(chosen) < sparsity:
            chosen.add(tuple(sorted(int(i) for i in rng.choice(T, degree, replace=False))))
        sets = sorted(chosen)
    g = rng.standard_normal(sparsity)
    return FourierTarget(T, [tuple(int(i) for i in S) for S in sets], np.abs(g) / np.linalg.norm(g))


def verify_spectrum(target: FourierTarget) -> dict[str, Any]:
    """Exact Walsh–Hadamard check of the target's degree and sparsity (O(T 2^T)).

    Compares the spectrum of the value table with the one implied by the parity-indicator terms
    (f̂(∅) = ½Σc_t, f̂(S_t) = c_t/2), and reads degree and sparsity off the computed spectrum.
    """
    from boundcalc.measure import fourier as ft

    spec = ft.fourier_spectrum(target, n=target.T)
    expected = ft.from_parity_indicators(target.terms(), target.T)
    summary = ft.spectrum_summary(spec)
    return {"degree": int(summary["degree"]), "sparsity": int(summary["sparsity_nonconstant"]),
            "max_abs_diff": float(np.abs(spec - expected).max()),
            "ok": bool(summary["degree"] == target.degree
                       and summary["sparsity_nonconstant"] == target.sparsity
                       and np.allclose(spec, expected, atol=1e-12))}


def all_inputs(T: int) -> np.ndarray:
    """All 2^T bit strings (row x = bits of the integer x, bit i = coordinate i)."""
    from boundcalc.measure.fourier import all_points

    return all_points(T)


# ---------------------------------------------------------------------------------------------
# the hard-coded construction (§1.3, Appendix B; no JL projection)
# ---------------------------------------------------------------------------------------------

def _trapezoid_units(D: int, plateau: float = PLATEAU) -> tuple[np.ndarray, np.ndarray, float]:
    """Biases, output weights and output bias of the trapezoidal wave
    ``h(z) = v_0 + Σ_k s_k [ReLU(z − k/D − w) − ReLU(z − (k+1)/D + w)]`` with
    ``v_k = 1[k even]``, ``w = plateau/D`` and ``s_k = (v_{k+1} − v_k)/(1/D − 2w)``."""
    w = plateau / D
    v = np.array([1.0 if k % 2 == 0 else 0.0 for k in range(D + 1)])
    biases, weights = [], []
    for k in range(D):
        s = (v[k + 1] - v[k]) / (1.0 / D - 2 * w)
        biases += [-(k / D + w), -((k + 1) / D - w)]
        weights += [s, -s]
    return np.array(biases), np.array(weights), float(v[0])


class Construction(nn.Module):
    """Lintilhac–Shaikh's hard-coded Transformer for a :class:`FourierTarget` (see module doc).

    Channels of the residual stream (width ``E = T + 5``): one-hot position 0..T (T = output
    position), ``bit``, ``z`` (Attn-1 average), ``g`` (MLP parity), ``out`` (Attn-2 result).
    Parameters (all trainable, so norms and Hessians cover them): ``qk1``, ``v1`` (E × E),
    ``mlp_in`` (2D_f × E, one row of ones on z), ``mlp_in_bias``, ``mlp_out`` (E × 2D_f),
    ``mlp_out_bias``, ``qk2``, ``v2`` (E × E), ``readout`` (E, the value Z on ``out``).
    Logits are ``x_tᵀ W_QK x_j`` (no 1/√d scaling).
    """

    def __init__(self, target: FourierTarget, mask: float = MASK, plateau: float = PLATEAU,
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        T, D, w = target.T, target.degree, target.sparsity
        if any(len(S) != D for S in target.sets):
            raise DomainError("construction: every component must have the same degree D_f")
        if not np.all(target.coeffs > 0):
            raise DomainError("construction: every Fourier coefficient must be positive")
        if w > T:
            raise DomainError(f"construction: sparsity ω={w} exceeds T={T}")
        self.T, self.D, self.omega = T, D, w
        self.E = E = T + 5
        self.bit, self.z, self.g, self.out = T + 1, T + 2, T + 3, T + 4
        self.Z = float(target.coeffs.sum())
        scale = 2.0 * math.log(T)

        qk1 = torch.zeros(E, E, dtype=dtype)
        for t, S in enumerate(target.sets):          # representative of component t is position t
            qk1[t, :T + 1] = mask
            qk1[t, list(S)] = scale
        v1 = torch.zeros(E, E, dtype=dtype)
        v1[self.z, self.bit] = 1.0
        b, s, v0 = _trapezoid_units(D, plateau)
        H = b.size
        mlp_in = torch.zeros(H, E, dtype=dtype)
        mlp_in[:, self.z] = 1.0
        mlp_out = torch.zeros(E, H, dtype=dtype)
        mlp_out[self.g] = torch.as_tensor(s, dtype=dtype)
        mlp_out_bias = torch.zeros(E, dtype=dtype)
        mlp_out_bias[self.g] = v0
        qk2 = torch.zeros(E, E, dtype=dtype)
        qk2[T, :T + 1] = mask
        qk2[T, :w] = torch.as_tensor(np.log(target.coeffs) + scale, dtype=dtype)
        v2 = torch.zeros(E, E, dtype=dtype)
        v2[self.out, self.g] = 1.0
        readout = torch.zeros(E, dtype=dtype)
        readout[self.out] = self.Z
        self.qk1, self.v1 = nn.Parameter(qk1), nn.Parameter(v1)
        self.mlp_in = nn.Parameter(mlp_in)
        self.mlp_in_bias = nn.Parameter(torch.as_tensor(b, dtype=dtype))
        self.mlp_out, self.mlp_out_bias = nn.Parameter(mlp_out), nn.Parameter(mlp_out_bias)
        self.qk2, self.v2, self.readout = nn.Parameter(qk2), nn.Parameter(v2), nn.Parameter(readout)
        # entries holding the [C] mask value (non-members in qk1, non-representatives in qk2)
        self.mask_entries = w * (T + 1 - D) + (T + 1 - w)
        self.mask_value = mask

    def embed(self, bits: torch.Tensor) -> torch.Tensor:
        """(B, T) bits → (B, T+1, E) residual stream: one-hot position, bit, zeros for z, g, out."""
        B, T, dt = bits.shape[0], self.T, self.qk1.dtype
        pos = torch.eye(T + 1, dtype=dt).expand(B, -1, -1)
        bit = torch.cat([bits.to(dt), torch.zeros(B, 1, dtype=dt)], dim=1).unsqueeze(-1)
        return torch.cat([pos, bit, torch.zeros(B, T + 1, 3, dtype=dt)], dim=-1)

    def forward(self, bits: torch.Tensor, return_internals: bool = False):
        X0 = self.embed(bits)
        A1 = torch.softmax(X0 @ self.qk1 @ X0.transpose(-2, -1), dim=-1)
        X1 = X0 + A1 @ X0 @ self.v1.T
        hidden = torch.relu(X1 @ self.mlp_in.T + self.mlp_in_bias)
        X2 = X1 + hidden @ self.mlp_out.T + self.mlp_out_bias
        q = X2[:, -1:, :]                                   # the output position's query only
        A2 = torch.softmax(q @ self.qk2 @ X2.transpose(-2, -1), dim=-1)
        y = (A2 @ X2 @ self.v2.T)[:, 0, :] @ self.readout
        if return_internals:
            return y, {"z": X1[..., self.z], "g": X2[..., self.g], "A2": A2[:, 0]}
        return y

    def piece_norms(self) -> dict[str, float]:
        """Squared Frobenius norm of every parameter tensor (the pieces of Theorem 10)."""
        return {n: float(p.detach().double().square().sum()) for n, p in self.named_parameters()}


def check_construction(target: FourierTarget, inputs: np.ndarray | None = None,
                       tol: float = 1e-9) -> dict[str, Any]:
    """Run the construction on ``inputs`` (default: all 2^T strings) against the target."""
    if inputs is None:
        if target.T > 20:
            raise BoundcalcError(f"check_construction: 2^{target.T} inputs is too many; pass inputs")
        inputs = all_inputs(target.T)
    model = Construction(target)
    with torch.no_grad():
        out = np.concatenate([model(torch.as_tensor(inputs[lo:lo + 4096])).numpy()
                              for lo in range(0, len(inputs), 4096)])
    err = float(np.abs(out - target(inputs)).max())
    return {"n_inputs": int(len(inputs)), "max_abs_error": err, "tolerance": tol,
            "ok": err <= tol}


# ---------------------------------------------------------------------------------------------
# losses, traces, perturbations
# ---------------------------------------------------------------------------------------------

def mse_closure(model: nn.Module, X: torch.Tensor, y: torch.Tensor) -> Callable[[], torch.Tensor]:
    """``() ↦ mean (f(x) − y)²`` on a fixed sample (the loss of Theorem 2, not clipped)."""
    return lambda: (model(X) - y).square().mean()


def gauss_newton_trace(model: nn.Module, X: torch.Tensor, chunk: int = 64) -> dict[str, Any]:
    """``(2/m) Σ_i ‖∇_θ f(x_i)‖²`` — the exact trace of ∇²L̂ where the loss is zero (§3.1) —
    in total and split by parameter tensor (``by_parameter``)."""
    from torch.func import functional_call, grad, vmap

    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def f_one(p, x):
        return functional_call(model, p, (x.unsqueeze(0),)).squeeze(0)

    per = vmap(grad(f_one), in_dims=(None, 0))
    sums = dict.fromkeys(params, 0.0)
    for lo in range(0, X.shape[0], chunk):
        g = per(params, X[lo:lo + chunk])
        for n, t in g.items():
            sums[n] += float(t.double().square().sum())
    by = {n: 2.0 * v / X.shape[0] for n, v in sums.items()}
    return {"total": float(sum(by.values())), "by_parameter": by}


def perturbed_loss(model: nn.Module, loss_fn: Callable[[], torch.Tensor], sigma: float,
                   draws: int, seed: int) -> dict[str, float]:
    """Monte Carlo ``E_u L̂(θ + u)``, ``u ~ N(0, σ² I)`` over every trainable parameter."""
    from boundcalc.measure.data.gibbs import perturbed

    gen = torch.Generator().manual_seed(seed)
    vals = []
    for _ in range(draws):
        with perturbed(model, sigma, gen), torch.no_grad():
            vals.append(float(loss_fn()))
    arr = np.array(vals)
    return {"mean": float(arr.mean()),
            "stderr": float(arr.std(ddof=1) / math.sqrt(draws)) if draws > 1 else float("nan"),
            "draws": draws, "sigma": sigma}


def perturbation_deltas(model: nn.Module, loss_fn: Callable[[], torch.Tensor], sigma: float,
                        draws: int, probes: int, seed: int) -> list[float]:
    """``|tr ∇²L̂(Θ+u) − tr ∇²L̂(Θ)|`` for ``draws`` perturbations u ~ N(0, σ²I).

    Both traces are Hutchinson estimates with the *same* Rademacher probes (common random
    numbers), so most probe noise cancels in the difference.
    """
    from boundcalc.measure.data.curvature import hutchinson_trace
    from boundcalc.measure.data.gibbs import perturbed

    before = hutchinson_trace(model, loss_fn, n_probes=probes, groups=None, seed=seed).samples
    gen = torch.Generator().manual_seed(seed + 1)
    out = []
    for _ in range(draws):
        with perturbed(model, sigma, gen):
            after = hutchinson_trace(model, loss_fn, n_probes=probes, groups=None,
                                     seed=seed).samples
        out.append(abs(float(np.mean(after - before))))
    return out


# ---------------------------------------------------------------------------------------------
# training the learned model
# ---------------------------------------------------------------------------------------------

@dataclass
class TrainConfig:
    d_emb: int = 16
    ffn: int = 64
    n_layers: int = 2
    lr: float = 4e-3
    weight_decay: float = 1e-4
    batch_size: int = 256
    dropout: float = 0.0
    stop_loss: float = 0.02
    max_epochs: int = 400


def train_learned(target: FourierTarget, X: np.ndarray, cfg: TrainConfig, seed: int
                  ) -> tuple[BooleanTransformer, dict[str, Any]]:
    """AdamW on the squared loss until the epoch's mean training loss is below ``stop_loss``."""
    torch.manual_seed(seed)
    model = BooleanTransformer(target.T, cfg.d_emb, cfg.ffn, cfg.n_layers, cfg.dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    Xt = torch.as_tensor(X, dtype=torch.long)
    yt = torch.as_tensor(target(X), dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed + 1)
    n = Xt.shape[0]
    losses = []
    epoch = 0
    model.train()
    for epoch in range(1, cfg.max_epochs + 1):
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for lo in range(0, n, cfg.batch_size):
            sel = perm[lo:lo + cfg.batch_size]
            loss = (model(Xt[sel]) - yt[sel]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * sel.numel()
        losses.append(total / n)
        if losses[-1] < cfg.stop_loss:
            break
    model.eval()
    return model, {"epochs": epoch, "final_epoch_loss": losses[-1],
                   "reached_stop_loss": losses[-1] < cfg.stop_loss, "loss_curve": losses}


# ---------------------------------------------------------------------------------------------
# one cell of the degree × sparsity grid
# ---------------------------------------------------------------------------------------------

@dataclass
class StudyConfig:
    T: int = 10
    degrees: tuple[int, ...] = (1, 2)
    sparsities: tuple[int, ...] = (1, 3)
    m: int = 256
    functions: int = 1
    n_test: int = 4096           # population loss: exact over all 2^T inputs when 2^T ≤ n_test
    probes: int = 30             # Hutchinson probes for reported traces
    p_hat_draws: int = 2         # perturbations per function for P̂
    p_hat_probes: int = 10       # Hutchinson probes per trace inside P̂ (common to before/after)
    perturb_draws: int = 6       # draws for E_u L̂(θ+u)
    delta: float = 0.05
    seed: int = 0
    train: TrainConfig = field(default_factory=TrainConfig)


def _bound_values(reg, omega: int, D: int, T: int, m: int, sigma_hat: float, delta: float,
                  p_hat: float | None, sigma_p: float | None) -> dict[str, Any]:
    import boundcalc as bc
    from boundcalc.stats import Quantity, Stats

    def stats(extra: dict[str, Quantity]) -> Stats:
        return Stats(scalars={"subgaussian_sigma": Quantity(sigma_hat, estimated=True,
                                                            method="empirical MGF (App. A)"),
                              **extra})

    base = {"omega": omega, "D_f": D, "T": T, "m": m, "delta": delta}
    out: dict[str, Any] = {}
    try:
        from boundcalc.optimize import optimize
        tr = optimize("ls_truncated", stats=stats({}), values=base, registry=reg)
        how = "boundcalc.optimize"
    except ImportError:  # pragma: no cover - optimize is part of the package
        tr = bc.compute("ls_truncated", stats=stats({}), values=base, registry=reg)
        how = "closed form snapped to the grid"
    out["truncated"] = {"value": tr.value, "label": tr.label, "sigma": tr.parameters["sigma"],
                        "terms": dict(tr.terms), "how": how}
    paper = bc.compute("ls_truncated", values={**base, "Sigma": 0.01}, registry=reg)
    out["truncated_paper_sigma"] = {"value": paper.value, "label": paper.label,
                                    "sigma": paper.parameters["sigma"]}
    if p_hat is not None and sigma_p is not None:
        import numpy as np

        from boundcalc.stats import Curve

        st = stats({})
        st.curves["perturbation_term"] = Curve(
            "sigma", np.array([sigma_p]), np.array([p_hat]), estimated=True,
            method="90th percentile of |Δtr| on the construction, Hutchinson with common probes")
        semi = bc.compute("ls_semi_analytic", registry=reg, values=base, params={"sigma": sigma_p},
                          stats=st)
        out["semi_analytic"] = {"value": semi.value, "label": semi.label, "sigma": sigma_p,
                                "terms": dict(semi.terms)}
    return out


def run_cell(D: int, omega: int, cfg: StudyConfig, registry=None,
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Targets, learned models, constructions and bound values of one (D_f, ω) class."""
    import boundcalc as bc
    from boundcalc.measure.data.curvature import hutchinson_trace
    from boundcalc.measure.subgaussian import subgaussian_constant

    reg = registry or bc.load_registry()
    T = cfg.T
    rng = np.random.default_rng([cfg.seed, D, omega])
    funcs = []
    deltas: list[float] = []
    for i in range(cfg.functions):
        if progress:
            progress(f"D_f={D} ω={omega} function {i + 1}/{cfg.functions}")
        target = random_target(T, D, omega, rng)
        spectrum = verify_spectrum(target) if T <= 20 else None
        X = rng.integers(0, 2, size=(cfg.m, T), dtype=np.int8)
        if 2**T <= cfg.n_test:
            X_test, test_kind = all_inputs(T), f"exact over all 2^{T} inputs"
        else:
            X_test, test_kind = (rng.integers(0, 2, size=(cfg.n_test, T), dtype=np.int8),
                                 f"{cfg.n_test} fresh uniform inputs")
        seed = int(rng.integers(2**31))
        model, log = train_learned(target, X, cfg.train, seed)
        model = model.double()
        Xt, Xtest = torch.as_tensor(X, dtype=torch.long), torch.as_tensor(X_test, dtype=torch.long)
        y, ytest = torch.as_tensor(target(X)), torch.as_tensor(target(X_test))
        with torch.no_grad():
            train_loss = float((model(Xt) - y).square().mean())
            test_sq = (model(Xtest) - ytest).square().numpy()
        learned_trace = hutchinson_trace(model, mse_closure(model, Xt, y), n_probes=cfg.probes,
                                         groups=None, seed=seed).total
        constr = Construction(target)
        c_loss = mse_closure(constr, Xt, y)
        with torch.no_grad():
            c_train_loss = float(c_loss())
        c_trace = hutchinson_trace(constr, c_loss, n_probes=cfg.probes, groups=None,
                                   seed=seed).total
        c_exact = gauss_newton_trace(constr, Xt)
        sigma_hat = subgaussian_constant(test_sq)
        funcs.append({"sets": [list(S) for S in target.sets], "coeffs": target.coeffs.tolist(),
                      "spectrum": spectrum, "train": log, "test_kind": test_kind,
                      "train_loss": train_loss, "test_loss": float(test_sq.mean()),
                      "gap": float(test_sq.mean()) - train_loss,
                      "learned_norm": parameter_norm(model),
                      "learned_params": count_parameters(model),
                      "learned_trace": _q(learned_trace),
                      "construction_norm": parameter_norm(constr),
                      "construction_params": count_parameters(constr),
                      "construction_pieces": constr.piece_norms(),
                      "construction_mask_sq": constr.mask_entries * constr.mask_value**2,
                      "construction_train_loss": c_train_loss,
                      "construction_trace": _q(c_trace),
                      "construction_trace_exact": c_exact["total"],
                      "construction_trace_by_parameter": c_exact["by_parameter"],
                      "sigma_hat": sigma_hat.value,
                      "_objects": (model, constr, Xt, y, seed)})
    # bound values (Σ̂ = median over the class's functions, an estimate)
    sigma_hat = float(np.median([f["sigma_hat"] for f in funcs]))
    first = _bound_values(reg, omega, D, T, cfg.m, sigma_hat, cfg.delta, None, None)
    sigma_p = first["truncated"]["sigma"]
    for f in funcs:
        model, constr, Xt, y, seed = f.pop("_objects")
        deltas += perturbation_deltas(constr, mse_closure(constr, Xt, y), sigma_p,
                                      cfg.p_hat_draws, cfg.p_hat_probes, seed + 7)
        f["perturbed_learned"] = perturbed_loss(model, mse_closure(model, Xt, y), sigma_p,
                                                cfg.perturb_draws, seed + 11)
        f["perturbed_construction"] = perturbed_loss(constr, mse_closure(constr, Xt, y), sigma_p,
                                                     cfg.perturb_draws, seed + 11)
    p_hat = float(np.percentile(deltas, 90))
    bounds = _bound_values(reg, omega, D, T, cfg.m, sigma_hat, cfg.delta, p_hat, sigma_p)
    G_u = bounds["truncated"]["terms"]["G_u"]
    L_norm = bounds["truncated"]["terms"]["L_norm"]
    for f in funcs:
        f["dominated_norm_construction"] = f["learned_norm"] <= f["construction_norm"]
        f["dominated_norm_L"] = f["learned_norm"] <= math.sqrt(L_norm)
        f["dominated_perturbed"] = (f["perturbed_learned"]["mean"]
                                    <= f["perturbed_construction"]["mean"])
        f["construction_trace_le_2Gu"] = f["construction_trace_exact"] <= 2 * G_u
    return {"D_f": D, "omega": omega, "T": T, "m": cfg.m, "functions": funcs,
            "sigma_hat": sigma_hat, "sigma_p": sigma_p, "p_hat": p_hat, "p_hat_samples": deltas,
            "G_u": G_u, "two_G_u": 2 * G_u, "L_norm": L_norm, "sqrt_L": math.sqrt(L_norm),
            "bounds": bounds}


def _q(q) -> dict[str, Any]:
    return {"value": q.value, "stderr": q.stderr, "ci": list(q.ci) if q.ci else None,
            "confidence": q.confidence}


def run_study(cfg: StudyConfig, progress: Callable[[str], None] | None = None,
              registry=None) -> list[dict[str, Any]]:
    """Every (D_f, ω) cell of the grid, degree-major."""
    import boundcalc as bc

    registry = registry or bc.load_registry()
    cells = []
    for D in cfg.degrees:
        for omega in cfg.sparsities:
            cells.append(run_cell(D, omega, cfg, registry, progress))
    return cells


def parity_curves(T_values, m_values, Sigma: float = 0.01, registry=None) -> dict[str, Any]:
    """log10 of the CoT and one-pass PARITY quantities (proxies) against T, per m."""
    import boundcalc as bc

    reg = registry or bc.load_registry()
    out: dict[str, Any] = {"T": list(T_values), "m": list(m_values), "Sigma": Sigma,
                           "cot": {}, "one_pass": {}}
    for m in m_values:
        cot, op = [], []
        for T in T_values:
            vals = {"T": T, "m": m, "Sigma": Sigma}
            cot.append(bc.compute("ls_parity_cot", values=vals, registry=reg).log10_value)
            op.append(bc.compute("ls_parity_one_pass", values=vals, registry=reg).log10_value)
        out["cot"][m], out["one_pass"][m] = cot, op
    out["kind"] = reg.get("ls_parity_cot").kind
    return out
