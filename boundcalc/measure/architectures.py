"""Layer maps: which tensor of a checkpoint plays which role, explicitly and completely.

Every tensor ends up either in the layer map (role, layer, group) or in the excluded list with a
reason. Matrices are handed to the statistics code in torch orientation ``(out, in)``:

* GPT-2's ``Conv1D`` stores ``(in, out)``; those weights are transposed, and the fused
  ``c_attn`` is split into q, k, v (rows ``[0:N]``, ``[N:2N]``, ``[2N:3N]`` after transposing);
* ``torch.nn.TransformerEncoder``'s fused ``in_proj_weight`` (3N × N) is split the same way;
* ViT is recognised under both the Hub naming (``encoder.layer.{l}.attention.attention.query``)
  and the transformers ≥ 5 naming (``layers.{l}.attention.q_proj``, ``mlp.fc1``, ``mlp.fc2``);
* LLaMA/Mistral use a gated FFN: ``ffn_in`` = ``up_proj``, ``ffn_gate`` = ``gate_proj``,
  ``ffn_out`` = ``down_proj`` (so M_in = up_projᵀ and M_gate = gate_projᵀ), and grouped-query
  attention: query head h uses key/value head ``h // (n_heads / n_kv_heads)``.

A user mapping ``{role: regex}`` (regex with a named group ``layer``) handles anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import CheckpointError, one_line
from ..words import option
from .io import TensorSource

MATRIX_ROLES = ("q", "k", "v", "o", "ffn_gate", "ffn_in", "ffn_out")
ROLES = MATRIX_ROLES + ("qkv", "embedding", "norm", "bias", "head")
ROLE_ORDER = {r: i for i, r in enumerate(("embedding",) + MATRIX_ROLES + ("bias", "norm", "head"))}
_BUFFER = re.compile(r"(^|\.)(position_ids|inv_freq|masked_bias|attn\.bias|num_batches_tracked)$")
_NORM = re.compile(r"(^|\.)(\w*norm\w*|ln(_\w+)?)\.", re.I)  # a module named *norm* or ln_*
_EMBED = re.compile(r"(embed|(^|\.)(wte|wpe|cls_token|mask_token|dist_token)(\.|$))", re.I)
_TOKEN_EMBED = re.compile(r"(^|\.)(word_embeddings|wte|embed_tokens)\.weight$")


@dataclass(frozen=True)
class Entry:
    """One role played by (a slice of) one tensor, in torch ``(out, in)`` orientation."""

    name: str
    role: str
    layer: int | None
    group: str
    shape: tuple[int, ...]
    rows: tuple[int, int] | None = None  # row slice after orientation fix (fused q/k/v)
    transpose: bool = False  # stored (in, out), e.g. GPT-2 Conv1D

    @property
    def label(self) -> str:
        return f"{self.name}[{self.role}]" if self.rows is not None else self.name

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "role": self.role, "layer": self.layer,
                               "head": None, "group": self.group, "shape": list(self.shape)}
        if self.rows is not None:
            out["rows"] = list(self.rows)
        if self.transpose:
            out["transposed"] = True
        return out


@dataclass
class LayerMap:
    """The result of mapping a checkpoint: entries, exclusions and model dimensions."""

    architecture: str
    entries: list[Entry]
    excluded: list[dict[str, str]]
    n_layers: int
    n_heads: int
    n_kv_heads: int
    hidden: int
    head_dim: int
    intermediate: int
    gated: bool
    model_type: str | None = None
    token_embedding: str | None = None
    notes: list[str] = field(default_factory=list)

    def layer_entries(self, layer: int) -> dict[str, Entry]:
        return {e.role: e for e in self.entries if e.layer == layer and e.role in MATRIX_ROLES}

    def tensor_names(self) -> list[str]:
        """Distinct included tensor names, in layer-map order."""
        return list(dict.fromkeys(e.name for e in self.entries))

    def group_names(self) -> list[str]:
        present = {e.group for e in self.entries}
        names = [f"layer.{l}" for l in range(self.n_layers)]
        return names + [g for g in ("embeddings", "head") if g in present]

    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for e in self.entries:
            counts[e.role] = counts.get(e.role, 0) + 1
        return {"architecture": self.architecture, "roles": dict(sorted(counts.items())),
                "excluded": len(self.excluded)}


@dataclass(frozen=True)
class _Arch:
    name: str
    layer: str  # regex locating "<layer prefix>.<index>." inside a name
    rules: tuple[tuple[str, str], ...]  # (regex on the in-layer remainder, role)
    transpose: bool = False  # all matrix rules store (in, out)
    gated: bool = False
    kv_grouped: bool = False


_ARCHS = (
    _Arch("bert", r"(^|\.)encoder\.layer\.(?P<layer>\d+)\.", (
        (r"attention\.self\.query\.weight", "q"), (r"attention\.self\.key\.weight", "k"),
        (r"attention\.self\.value\.weight", "v"), (r"attention\.output\.dense\.weight", "o"),
        (r"intermediate\.dense\.weight", "ffn_in"), (r"output\.dense\.weight", "ffn_out"))),
    _Arch("vit", r"(^|\.)encoder\.layer\.(?P<layer>\d+)\.", (
        (r"attention\.attention\.query\.weight", "q"), (r"attention\.attention\.key\.weight", "k"),
        (r"attention\.attention\.value\.weight", "v"), (r"attention\.output\.dense\.weight", "o"),
        (r"intermediate\.dense\.weight", "ffn_in"), (r"output\.dense\.weight", "ffn_out"))),
    _Arch("vit", r"(^|\.)layers\.(?P<layer>\d+)\.", (  # transformers >= 5 ViT naming
        (r"attention\.q_proj\.weight", "q"), (r"attention\.k_proj\.weight", "k"),
        (r"attention\.v_proj\.weight", "v"), (r"attention\.o_proj\.weight", "o"),
        (r"mlp\.fc1\.weight", "ffn_in"), (r"mlp\.fc2\.weight", "ffn_out"))),
    _Arch("gpt2", r"(^|\.)h\.(?P<layer>\d+)\.", (
        (r"attn\.c_attn\.weight", "qkv"), (r"attn\.c_proj\.weight", "o"),
        (r"mlp\.c_fc\.weight", "ffn_in"), (r"mlp\.c_proj\.weight", "ffn_out")), transpose=True),
    _Arch("llama", r"(^|\.)layers\.(?P<layer>\d+)\.", (
        (r"self_attn\.q_proj\.weight", "q"), (r"self_attn\.k_proj\.weight", "k"),
        (r"self_attn\.v_proj\.weight", "v"), (r"self_attn\.o_proj\.weight", "o"),
        (r"mlp\.gate_proj\.weight", "ffn_gate"), (r"mlp\.up_proj\.weight", "ffn_in"),
        (r"mlp\.down_proj\.weight", "ffn_out")), gated=True, kv_grouped=True),
    _Arch("torch_transformer", r"(^|\.)layers\.(?P<layer>\d+)\.", (
        (r"self_attn\.in_proj_weight", "qkv"), (r"self_attn\.out_proj\.weight", "o"),
        (r"linear1\.weight", "ffn_in"), (r"linear2\.weight", "ffn_out"))),
)
_MODEL_TYPES = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "electra": "bert",
                "camembert": "bert", "vit": "vit", "gpt2": "gpt2", "llama": "llama",
                "mistral": "llama", "qwen2": "llama"}
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "nhead")
_KV_KEYS = ("num_key_value_heads", "n_kv_heads")


MAX_LAYER_INDEX = 1_000_000


def _layer_index(text: str, name: str) -> int:
    """A layer number from a tensor name; absurd ones (5,000 digits) are refused."""
    if len(text) > 7 or int(text) > MAX_LAYER_INDEX:
        raise CheckpointError(f"tensor '{one_line(name)[:120]}': layer index {text[:20]}"
                              f"{'…' if len(text) > 20 else ''} is beyond {MAX_LAYER_INDEX}")
    return int(text)


def _config_int(config: Mapping[str, Any] | None, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = (config or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _detect(src: TensorSource, config: Mapping[str, Any] | None) -> _Arch | None:
    names = src.names()
    scores = []
    for arch in _ARCHS:
        q_rule = arch.rules[0][0]
        pat = re.compile(arch.layer + q_rule + "$")
        scores.append((sum(1 for n in names if pat.search(n)), arch))
    hint = _MODEL_TYPES.get(str((config or {}).get("model_type", "")).lower())
    best = max(scores, key=lambda s: (s[0], s[1].name == hint))
    return best[1] if best[0] > 0 else None


def _unknown(src: TensorSource) -> CheckpointError:
    names = src.names()
    sample = ", ".join(f"'{n}'" for n in names[:4])
    return CheckpointError(
        f"{src.source}: unknown architecture ({len(names)} tensors, e.g. {sample}); supported: "
        "BERT/RoBERTa/MiniLM, GPT-2, ViT, LLaMA/Mistral, torch TransformerEncoder; otherwise "
        "pass mapping={'q': r'...(?P<layer>\\d+)...query.weight', 'k': ..., 'v': ..., 'o': ..., "
        "'ffn_in': ..., 'ffn_out': ...} to measure()")


def _outer_entry(name: str, shape: tuple[int, ...]) -> Entry:
    """Classify a float tensor that lies outside every transformer layer."""
    group = "embeddings" if _EMBED.search(name) else "head"
    if _NORM.search(name):
        role = "norm"
    elif name.endswith("bias"):
        role = "bias"
    elif group == "embeddings":
        role = "embedding"
    else:
        role = "head"
    return Entry(name, role, None, group, shape)


def _compile_mapping(mapping: Mapping[str, str]) -> list[tuple[re.Pattern, str]]:
    rules = []
    for key, value in mapping.items():
        role, regex = (key, value) if key in ROLES else (value, key)
        if role not in ROLES:
            raise CheckpointError(f"mapping entry {key!r}: unknown role; expected one of "
                                  f"{', '.join(ROLES)}")
        try:
            rules.append((re.compile(regex), role))
        except (re.error, TypeError) as exc:
            raise CheckpointError(f"mapping entry {key!r}: invalid regex ({exc})") from None
    return rules


def _classify(src: TensorSource, arch: _Arch | None,
              user: list[tuple[re.Pattern, str]] | None) -> tuple[list[Entry], list[dict]]:
    entries: list[Entry] = []
    excluded: list[dict[str, str]] = []
    layer_re = re.compile(arch.layer) if arch else None
    rules = [(re.compile(r + "$"), role) for r, role in arch.rules] if arch else []
    for name in src.names():
        shape = src.shape(name)
        tied = src.tied_to(name)
        if not src.is_float(name):
            reason = f"non-floating buffer ({src.dtype_name(name)})"
            excluded.append({"name": name, "reason": reason})
            continue
        if tied is not None:
            excluded.append({"name": name, "reason": f"tied to '{tied}' (same storage)"})
            continue
        if _BUFFER.search(name):
            excluded.append({"name": name, "reason": "buffer, not a trained parameter"})
            continue
        if user is not None:
            entry = _user_entry(name, shape, user)
            if entry is None:
                excluded.append({"name": name, "reason": "not matched by the user mapping"})
            else:
                entries.append(entry)
            continue
        m = layer_re.search(name)
        if m is None:
            entries.append(_outer_entry(name, shape))
            continue
        layer, rest = _layer_index(m.group("layer"), name), name[m.end():]
        role = next((r for pat, r in rules if pat.fullmatch(rest)), None)
        if role is None:
            if _NORM.search(rest):
                role = "norm"
            elif rest.endswith("bias"):
                role = "bias"
            else:
                excluded.append({"name": name, "reason": f"unrecognised tensor inside layer "
                                                         f"{layer} of a {arch.name} model"})
                continue
        entries.append(Entry(name, role, layer, f"layer.{layer}", shape,
                             transpose=arch.transpose and role in MATRIX_ROLES + ("qkv",)))
    return entries, excluded


def _non_float_role(src: TensorSource, arch: _Arch | None, layer: int,
                    role: str) -> str | None:
    """The name of a non-floating tensor that the layer map would give ``role`` in ``layer``
    (for a message naming its dtype), or None."""
    if arch is None:
        return None
    layer_re = re.compile(arch.layer)
    for name in src.names():
        if src.is_float(name):
            continue
        m = layer_re.search(name)
        if m is None or _layer_index(m.group("layer"), name) != layer:
            continue
        rest = name[m.end():]
        got = next((r for pat, r in ((re.compile(r + "$"), r2) for r, r2 in arch.rules)
                    if pat.fullmatch(rest)), None)
        if got == role or (got == "qkv" and role in ("q", "k", "v")):
            return name
    return None


def _user_entry(name: str, shape: tuple[int, ...],
                rules: list[tuple[re.Pattern, str]]) -> Entry | None:
    for pat, role in rules:
        m = pat.search(name)
        if m is None:
            continue
        layer_s = m.groupdict().get("layer")
        if layer_s is None and role in MATRIX_ROLES + ("qkv",):
            raise CheckpointError(f"mapping for role '{role}' matched '{name}' but has no "
                                  "(?P<layer>...) group")
        layer = _layer_index(layer_s, name) if layer_s is not None else None
        group = f"layer.{layer}" if layer is not None else _outer_entry(name, shape).group
        return Entry(name, role, layer, group, shape)
    return None


def _oriented(e: Entry) -> tuple[int, int]:
    if len(e.shape) != 2:
        raise CheckpointError(f"'{e.name}': role {e.role} needs a 2-D weight, got shape "
                              f"{list(e.shape)}")
    out_dim, in_dim = (e.shape[1], e.shape[0]) if e.transpose else (e.shape[0], e.shape[1])
    return (e.rows[1] - e.rows[0], in_dim) if e.rows is not None else (out_dim, in_dim)


def _split_fused(entries: list[Entry]) -> list[Entry]:
    out = []
    for e in entries:
        if e.role != "qkv":
            out.append(e)
            continue
        rows, _ = _oriented(e)
        if rows % 3:
            raise CheckpointError(f"'{e.name}': fused q/k/v weight with {rows} output rows, "
                                  "not divisible by 3")
        n = rows // 3
        out += [Entry(e.name, r, e.layer, e.group, e.shape, (i * n, (i + 1) * n), e.transpose)
                for i, r in enumerate(("q", "k", "v"))]
    return out


def build_layer_map(src: TensorSource, n_heads: int | None = None,
                    mapping: Mapping[str, str] | None = None) -> LayerMap:
    """Map every tensor of ``src`` to a role, or exclude it with a reason; check the shapes."""
    config = src.config
    user = _compile_mapping(mapping) if mapping else None
    arch = None if user else _detect(src, config)
    if arch is None and user is None:
        raise _unknown(src)
    entries, excluded = _classify(src, arch, user)
    entries = _split_fused(entries)
    name = arch.name if arch else "custom"
    layers = sorted({e.layer for e in entries if e.layer is not None and e.role in MATRIX_ROLES})
    if not layers:
        raise _unknown(src) if user is None else CheckpointError(
            f"{src.source}: the user mapping matched no attention/FFN weight")
    if layers != list(range(len(layers))):
        missing = next(i for i in range(len(layers) + 1) if i not in layers)
        raise CheckpointError(f"{src.source}: layer {missing} is missing (found layers "
                              f"{layers[:8]}); expected layers 0..{layers[-1]}")
    stray = next((e for e in entries if e.layer is not None and e.layer not in layers), None)
    if stray is not None:
        raise CheckpointError(f"'{stray.name}': belongs to layer {stray.layer}, but only layers "
                              f"0..{layers[-1]} have attention/FFN weights")
    gated = any(e.role == "ffn_gate" for e in entries)
    needed = ("q", "k", "v", "o", "ffn_in", "ffn_out") + (("ffn_gate",) if gated else ())
    by_layer: dict[int, dict[str, Entry]] = {l: {} for l in layers}
    for e in entries:
        if e.layer is not None and e.role in MATRIX_ROLES:
            if e.role in by_layer[e.layer]:
                raise CheckpointError(f"{src.source}: layer {e.layer} has two '{e.role}' weights: "
                                      f"'{by_layer[e.layer][e.role].name}' and '{e.name}'")
            by_layer[e.layer][e.role] = e
    for l in layers:
        for role in needed:
            if role not in by_layer[l]:
                held = _non_float_role(src, arch, l, role)
                if held is not None:
                    raise CheckpointError(
                        f"{src.source}: layer {l}'s '{role}' weight '{held}' is stored as "
                        f"{src.dtype_name(held)}, not a floating-point type; boundcalc measures "
                        "float16/bfloat16/float32/float64 weights (dequantize the checkpoint "
                        "first)")
                raise CheckpointError(f"{src.source}: layer {l} has no '{role}' weight "
                                      f"({name} layer map)")
    for l in layers:
        for role, e in by_layer[l].items():
            if 0 in _oriented(e):
                raise CheckpointError(f"'{e.name}': role {role} of layer {l} has shape "
                                      f"{list(_oriented(e))} (out, in): an empty weight "
                                      f"matrix has no spectrum to measure")
    first = by_layer[0]
    q_rows, hidden = _oriented(first["q"])
    k_rows, _ = _oriented(first["k"])
    intermediate = _oriented(first["ffn_in"])[0]
    heads = n_heads or _config_int(config, _HEAD_KEYS)
    if heads is None:
        raise CheckpointError(f"{src.source}: the number of attention heads is not stored "
                              f"({name} checkpoint without config.json); pass "
                              f"{option('n_heads', 'N')}")
    if q_rows % heads:
        raise CheckpointError(f"{src.source}: {q_rows} query rows cannot be split into {heads} "
                              "heads; check n_heads")
    head_dim = q_rows // heads
    if k_rows % head_dim or heads % (k_rows // head_dim):
        raise CheckpointError(f"{src.source}: key weight has {k_rows} rows, not a whole number "
                              f"of {head_dim}-wide heads dividing {heads} query heads")
    kv_heads = k_rows // head_dim
    expect = {"q": (q_rows, hidden), "k": (k_rows, hidden), "v": (k_rows, hidden),
              "o": (hidden, q_rows), "ffn_in": (intermediate, hidden),
              "ffn_gate": (intermediate, hidden), "ffn_out": (hidden, intermediate)}
    for l in layers:
        for role, e in by_layer[l].items():
            if _oriented(e) != expect[role]:
                raise CheckpointError(f"'{e.name}': role {role} of layer {l} has shape "
                                      f"{list(_oriented(e))} (out, in), expected "
                                      f"{list(expect[role])}")
    token = next((e.name for e in entries if e.role == "embedding"
                  and _TOKEN_EMBED.search(e.name) and len(e.shape) == 2
                  and e.shape[1] == hidden), None)
    notes = []
    if gated:
        notes.append("gated FFN: M_in = up_proj^T, M_gate = gate_proj^T, M_out = down_proj^T")
    if kv_heads != heads:
        notes.append(f"grouped-query attention: query head h uses kv head h // {heads // kv_heads}")
    entries.sort(key=lambda e: (e.layer is None, e.layer if e.layer is not None else 0,
                                e.group, ROLE_ORDER.get(e.role, 99), e.name))
    excluded.sort(key=lambda x: x["name"])
    return LayerMap(name, entries, excluded, len(layers), heads, kv_heads, hidden, head_dim,
                    intermediate, gated, (config or {}).get("model_type"), token, notes)


def format_layer_map(lmap: LayerMap, full: bool = False) -> list[str]:
    """Plain-text lines describing the map (role counts, exclusions, optionally every entry)."""
    s = lmap.summary()
    lines = [f"architecture {lmap.architecture}: {lmap.n_layers} layers x {lmap.n_heads} heads "
             f"(kv {lmap.n_kv_heads}), hidden {lmap.hidden}, head dim {lmap.head_dim}, "
             f"intermediate {lmap.intermediate}",
             "roles: " + ", ".join(f"{r} {c}" for r, c in s["roles"].items())]
    lines += [f"note: {n}" for n in lmap.notes]
    if full:
        lines += [f"  {e.label}  role={e.role} layer={e.layer} group={e.group}"
                  f"{' (transposed)' if e.transpose else ''}" for e in lmap.entries]
    lines += [f"excluded {x['name']}: {x['reason']}" for x in lmap.excluded]
    return lines
