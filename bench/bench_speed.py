"""Speed of LOCUS inference and training against the public reference code, a plain loop, and the FLOP limit.

  .venv/bin/python -m bench.bench_speed --reference bench/.cache/locus_code_release [--threads 1,2] [--repeats 5]

--reference: a checkout of patel-shivam/locus_code_release (pinned commit REFERENCE_COMMIT; it has no licence,
so it is kept in the ignored bench/.cache/ and never committed). Without it, the reference column is skipped.

(a) embed 112 models, each evaluated on the same 4,096 anchors (768-d encodings; the paper's setting):
    reference `evaluation.embed_all_models` vs the plain loop below vs `embed_evaluation_sets` in fp32
    ("library", low_precision=False) and in bf16 ("library bf16", low_precision=True).
(b) score 4,096 queries x 112 models: reference `evaluation.score_queries_against_models` vs the plain loop
    vs `predict_proba` (fp32 and bf16).
They run in one process, alternately, at each thread count; time = best and median of --repeats after a
warm-up, wall and the process's CPU time ("cpu", less disturbed by other processes on a shared machine). The reference
gets the library's weights copied in (its MAB has no bias on the q/k/v/o projections, so the library model here has
those biases at 0; its MAB has a ReLU after the first LayerNorm, which the library's does not: outputs are compared on a
copy of the reference with that ReLU removed, and timed on the unmodified reference).
(c) one training epoch (default TrainConfig, validation included) on a random pool the size of the synthetic one (112
models x 4,096 queries, 768-d, 80/20 query split): the current library vs the library in --before (default: commit
BEFORE_COMMIT, extracted to bench/.cache/before/), alternately, each in a fresh subprocess.
GFLOP: counted with torch.utils.flop_counter's per-operator formulas on the library's own fp32 run (matrix products
and attention, forward and backward, the CPU attention kernel included; padded work included). FLOP limit: the best
GFLOP/s of a 2048^3 fp32 matmul measured in the same run at the same thread count; "x limit" = measured time / (GFLOP /
that rate); both by CPU time (GFLOP/s = GFLOP / best CPU time).
Peak MB: the rise of the process's peak resident set (VmHWM, reset via /proc/self/clear_refs) over the
resident set before the warm-up call.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from locus_model.infer import cpu_has_bf16, embed_evaluation_sets, inference_precision, predict_proba
from locus_model.model import Locus, LocusConfig

REFERENCE_COMMIT = "e4ebf6965685ad72566a7f068e6ed011a154350b"
BEFORE_COMMIT = "28136bf"
M, N_ANCHORS, Q_SCORE, D = 112, 4096, 4096, 768
BENCH = Path(__file__).resolve().parent  # not bench.common: the training case runs this file under --before's library


def _vm(key: str) -> int:  # kB
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def peak_matmul_gflops(repeats: int = 5, n: int = 2048) -> float:
    """The best rate of a 2048^3 fp32 matmul, by the process's CPU time (as the "cpu" columns)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_cpu_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def _cpu_timed(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _cpu_flash(query, key, value, *args, out_val=None, **kwargs) -> int:
    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _cpu_flash_backward(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


# torch's registry has the CUDA attention kernels only; on CPU scaled_dot_product_attention runs these two
CPU_FORMULAS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward,
}


class _FlopCount(TorchDispatchMode):
    """FlopCounterMode's per-operator formulas (plus the CPU attention kernel's, CPU_FORMULAS) without its module
    tracker (which fails under inference_mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket) or CPU_FORMULAS.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        return out


def gflop(fn, *, grad: bool = False) -> float:
    with torch.set_grad_enabled(grad), _FlopCount() as counter:
        fn()
    return counter.flops / 1e9


# ---------------------------------------------------------------------------------------------------
# the plain loop: LOCUS evaluated the obvious way, on a Locus model's weights (same function): no masks, no
# batching, no shared work; one model at a time, the tokenizer on the concatenated [phi, y, phi * (2y - 1)], and
# the correctness predictor on (z, query) pairs with every query reprojected for every model (as the reference does)


def _mab(mab, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (nx, d), (ny, d) -> (nx, d)
    h = mab.n_heads
    d = x.shape[-1]
    dh = d // h
    q = mab.w_q(x).view(-1, h, dh).transpose(0, 1)  # (h, nx, dh)
    k = mab.w_k(y).view(-1, h, dh).transpose(0, 1)  # (h, ny, dh)
    v = mab.w_v(y).view(-1, h, dh).transpose(0, 1)  # (h, ny, dh)
    att = F.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), dim=-1) @ v  # (h, nx, dh)
    hid = mab.ln_attn(x + mab.w_o(att.transpose(0, 1).reshape(-1, d)))
    return mab.ln_ff(hid + mab.ff(hid))


@torch.no_grad()
def naive_embed(model: Locus, phi: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # (n, D), (n,) -> (d,)
    y = y[:, None]
    tokens = model.tokenizer(torch.cat([phi, y, phi * (2 * y - 1)], dim=-1))  # (n, d)
    for block in model.blocks:
        summary = _mab(block.compress, block.latents[0], tokens)  # (r, d)
        tokens = _mab(block.broadcast, tokens, summary)  # (n, d)
    return model.out(_mab(model.pool.mab, model.pool.seeds[0], tokens)[0])  # (d,)


@torch.no_grad()
def naive_embed_all(model: Locus, encodings: torch.Tensor, sets) -> torch.Tensor:  # -> (M, d)
    return torch.stack([naive_embed(model, encodings[idx], y) for idx, y in sets])


@torch.no_grad()
def naive_predict_proba(model: Locus, z: torch.Tensor, encodings: torch.Tensor) -> torch.Tensor:  # (M, Q)
    rows = []
    for m in range(z.shape[0]):  # per model: reproject every query, build (Q, 3d) pair features
        u = model.query_proj(encodings)  # (Q, d)
        zm = z[m].expand_as(u)
        h = F.relu(model.hidden(torch.cat([zm, u, zm * u], dim=-1)))
        rows.append(torch.sigmoid(model.head(h)[:, 0]))
    return torch.stack(rows)


# ---------------------------------------------------------------------------------------------------
# the reference, with the library's weights


def load_reference(path: Path):
    scripts = path / "scripts"
    if not (scripts / "evaluation.py").exists():
        raise SystemExit(
            f"--reference {path}: no scripts/evaluation.py there. How to fix: extract "
            f"patel-shivam/locus_code_release@{REFERENCE_COMMIT[:12]} into that folder."
        )
    commit_file = path / "COMMIT"
    commit = commit_file.read_text().strip() if commit_file.exists() else "unknown (no COMMIT file)"
    sys.path.insert(0, str(scripts))  # the reference's modules import each other by bare name
    import evaluation  # noqa: PLC0415  (the reference's own module; prints its device on import)
    import router_model  # noqa: PLC0415

    return evaluation, router_model, commit


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    if dst.bias is not None:
        dst.bias.copy_(src.bias)


def _copy_mab(dst, src) -> None:
    for a, b in ((dst.W_q, src.w_q), (dst.W_k, src.w_k), (dst.W_v, src.w_v), (dst.fc_o, src.w_o)):
        _copy_linear(a, b)
    _copy_linear(dst.ln0, src.ln_attn)
    _copy_linear(dst.ln1, src.ln_ff)
    _copy_linear(dst.rff.net[0], src.ff[0])
    _copy_linear(dst.rff.net[2], src.ff[2])


@torch.no_grad()
def reference_with_weights_of(lib: Locus, router_model) -> nn.Module:
    """The reference ModelEmbedRouter (same widths) carrying lib's weights; every parameter is assigned."""
    c = lib.config
    ref = router_model.ModelEmbedRouter(
        router_model.Config(
            q_dim=c.query_dim,
            z_dim=c.d,
            n_heads=c.n_heads,
            n_layers=c.n_blocks,
            m_induce=c.n_latents,
            decoder_hidden=c.predictor_hidden,
        )
    ).eval()
    enc = ref.encoder
    _copy_linear(enc.input[0], lib.tokenizer)
    for layer, block in zip(enc.layers, lib.blocks):
        layer.I.copy_(block.latents)
        _copy_mab(layer.mab1, block.compress)
        _copy_mab(layer.mab2, block.broadcast)
    enc.pma.S.copy_(lib.pool.seeds)
    _copy_mab(enc.pma.mab, lib.pool.mab)
    _copy_linear(enc.out[0], lib.out)
    _copy_linear(ref.decoder.U, lib.query_proj)
    _copy_linear(ref.decoder.mlp_head[0], lib.hidden)
    _copy_linear(ref.decoder.mlp_head[2], lib.head)
    n_ref = sum(p.numel() for p in ref.parameters())
    n_lib = (
        sum(p.numel() for p in lib.parameters())
        - sum(
            m.bias.numel()
            for blk in [*lib.blocks]
            for mab in (blk.compress, blk.broadcast)
            for m in (mab.w_q, mab.w_k, mab.w_v, mab.w_o)
        )
        - sum(m.bias.numel() for m in (lib.pool.mab.w_q, lib.pool.mab.w_k, lib.pool.mab.w_v, lib.pool.mab.w_o))
    )
    assert n_ref == n_lib, (n_ref, n_lib)  # every reference weight has its library counterpart
    return ref


def library_model(seed: int = 0) -> Locus:
    torch.manual_seed(seed)
    lib = Locus(LocusConfig(query_dim=D)).eval()
    with torch.no_grad():  # the reference's attention projections have no bias
        mabs = [m for blk in lib.blocks for m in (blk.compress, blk.broadcast)] + [lib.pool.mab]
        for mab in mabs:
            for lin in (mab.w_q, mab.w_k, mab.w_v, mab.w_o):
                lin.bias.zero_()
    return lib


# ---------------------------------------------------------------------------------------------------
# (a), (b)


def inference_cases(reference, seed: int = 0) -> tuple[dict, dict, dict]:
    lib = library_model(seed)
    rng = np.random.default_rng(seed)
    enc = rng.normal(size=(N_ANCHORS, D)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    labels = (rng.random((M, N_ANCHORS)) > 0.5).astype(np.float32)
    sets = [(np.arange(N_ANCHORS), labels[m]) for m in range(M)]
    enc_t = torch.from_numpy(enc)
    sets_t = [(torch.from_numpy(i), torch.from_numpy(y)) for i, y in sets]
    z = embed_evaluation_sets(lib, enc, sets, low_precision=False)
    queries = rng.normal(size=(Q_SCORE, D)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    embed = {
        "library": lambda: embed_evaluation_sets(lib, enc, sets, low_precision=False),
        "library bf16": lambda: embed_evaluation_sets(lib, enc, sets, low_precision=True),
        "plain loop": lambda: naive_embed_all(lib, enc_t, sets_t).numpy(),
    }
    score = {
        "library": lambda: predict_proba(lib, z, queries, low_precision=False),
        "library bf16": lambda: predict_proba(lib, z, queries, low_precision=True),
        "plain loop": lambda: naive_predict_proba(lib, torch.from_numpy(z), torch.from_numpy(queries)).numpy(),
    }
    diffs = {}
    if reference is not None:
        evaluation, router_model, _ = reference
        ref = reference_with_weights_of(lib, router_model)
        ref_same = copy.deepcopy(ref)  # the function the library computes: no ReLU after the first LayerNorm
        for mod in ref_same.modules():
            if hasattr(mod, "relu") and isinstance(mod.relu, nn.ReLU):
                mod.relu = nn.Identity()
        anchors = np.arange(N_ANCHORS)
        embed["reference"] = lambda: evaluation.embed_all_models(ref, enc, labels, anchors, "cpu").numpy()
        z_t = torch.from_numpy(z)
        score["reference"] = lambda: (
            torch.sigmoid(torch.from_numpy(evaluation.score_queries_against_models(ref, z_t, queries, "cpu"))).numpy().T
        )
        z_ref = evaluation.embed_all_models(ref_same, enc, labels[:8], anchors, "cpu").numpy()
        diffs["embed: library vs reference (ReLU removed)"] = float(np.abs(z[:8] - z_ref).max())
        z_ref_relu = evaluation.embed_all_models(ref, enc, labels[:8], anchors, "cpu").numpy()
        diffs["embed: library vs unmodified reference (its extra ReLU)"] = float(np.abs(z[:8] - z_ref_relu).max())
        diffs["score: library vs reference"] = float(np.abs(score["library"]() - score["reference"]()).max())
    diffs["embed: bf16 vs fp32"] = float(np.abs(embed["library bf16"]() - z).max())
    diffs["score: bf16 vs fp32 probabilities"] = float(np.abs(score["library bf16"]() - score["library"]()).max())
    diffs["embed: library vs plain loop"] = float(np.abs(z[:8] - naive_embed_all(lib, enc_t, sets_t[:8]).numpy()).max())
    diffs["score: library vs plain loop"] = float(np.abs(score["library"]() - score["plain loop"]()).max())
    # counted outside inference_mode (under it, composite ops such as linear reach the counter undecomposed)
    flops = {
        "embed": gflop(lambda: embed_evaluation_sets.__wrapped__(lib, enc, sets, low_precision=False)),
        "score": gflop(lambda: predict_proba.__wrapped__(lib, z, queries, low_precision=False)),
    }
    return {"embed": embed, "score": score}, diffs, flops


def measure_alternately(cases: dict, repeats: int) -> dict:
    """{impl: {"times": [...], "cpu_times": [...], "peak_mb": x}}: one warm-up each (peak memory), then repeats
    rounds in turn. cpu = the process's CPU time (less disturbed than wall time by other processes on the cores)."""
    out = {}
    for name, fn in cases.items():
        Path("/proc/self/clear_refs").write_text("5")
        rss0 = _vm("VmRSS")
        fn()
        out[name] = {"times": [], "cpu_times": [], "peak_mb": (_vm("VmHWM") - rss0) / 1024}
    for _ in range(repeats):
        for name, fn in cases.items():
            cpu0 = time.process_time()
            out[name]["times"].append(_timed(fn))
            out[name]["cpu_times"].append(time.process_time() - cpu0)
    for r in out.values():
        r["best"], r["median"] = min(r["times"]), statistics.median(r["times"])
        r["cpu_best"], r["cpu_median"] = min(r["cpu_times"]), statistics.median(r["cpu_times"])
    return out


# ---------------------------------------------------------------------------------------------------
# (c) training, each epoch in a fresh subprocess


def train_epoch_case(epochs: int, threads: int, count_flops: bool) -> dict:
    try:  # the package on PYTHONPATH: current or before (BEFORE_COMMIT kept training in locus_model/train.py)
        from locus_model.training import TrainConfig, train_locus
    except ImportError:
        from locus_model.train import TrainConfig, train_locus

    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    enc = rng.normal(size=(N_ANCHORS, D)).astype(np.float32)
    enc /= np.linalg.norm(enc, axis=1, keepdims=True)
    scores = (rng.random((M, N_ANCHORS)) > 0.5).astype(np.float32)
    is_val = rng.random(N_ANCHORS) < 0.2
    train, val = np.where(is_val[None], np.nan, scores), np.where(is_val[None], scores, np.nan)
    cfg = TrainConfig(epochs=epochs, patience=epochs, device="cpu", finetune_steps=0)

    def run():
        return train_locus(enc, train, val, model_config=LocusConfig(query_dim=D), train_config=cfg, progress=False)

    cpu0 = time.process_time()
    res = {"seconds": [h["seconds"] for h in run().history]}
    res["cpu_seconds_per_epoch"] = (time.process_time() - cpu0) / epochs  # setup and validation included
    if count_flops:
        cfg = TrainConfig(epochs=1, patience=1, device="cpu", finetune_steps=0)
        res["gflop_per_epoch"] = gflop(run, grad=True)
    return res


def training(repeats: int, epochs: int, threads: int, before: Path) -> dict:
    impls = {"library": str(BENCH.parent)}
    if (before / "locus_model").exists():
        impls["before"] = str(before)
    else:
        print(
            f"(c): no {before}/locus_model; extract it with: git archive {BEFORE_COMMIT} locus_model | "
            f"tar -x -C {before}  -- measuring the current library only"
        )
    out = {name: {"epoch_seconds": []} for name in impls}
    for r in range(repeats):
        for name, path in impls.items():
            cmd = [sys.executable, __file__, "--train-case", str(epochs), "--threads", str(threads)]
            if name == "library" and r == 0:
                cmd.append("--count-flops")
            env = {**os.environ, "PYTHONPATH": path}
            res = json.loads(
                subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.splitlines()[-1]
            )
            out[name]["epoch_seconds"] += res["seconds"]
            out[name].setdefault("cpu_seconds_per_epoch", []).append(res["cpu_seconds_per_epoch"])
            if "gflop_per_epoch" in res:
                out["gflop_per_epoch"] = res["gflop_per_epoch"]
    for name in impls:
        s = out[name]["epoch_seconds"]
        out[name]["best"], out[name]["median"] = min(s), statistics.median(s)
        out[name]["cpu_best"] = min(out[name]["cpu_seconds_per_epoch"])
    return out


# ---------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", type=Path, help="checkout of patel-shivam/locus_code_release")
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--train-repeats", type=int, default=2, help="subprocess runs per implementation")
    ap.add_argument("--train-epochs", type=int, default=2, help="epochs per training run")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument(
        "--before",
        type=Path,
        default=BENCH / ".cache" / "before",
        help=f"folder holding the locus_model of the 'before' library (default: {BEFORE_COMMIT}'s)",
    )
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "speed.json")
    ap.add_argument("--train-case", type=int, help=argparse.SUPPRESS)  # internal: one training run
    ap.add_argument("--count-flops", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    if args.train_case:
        print(json.dumps(train_epoch_case(args.train_case, threads[0], args.count_flops)))
        return

    reference = None
    if args.reference is None:
        print("no --reference given: the reference column is skipped (see the module docstring)")
    else:
        reference = load_reference(args.reference)
        flag = "" if reference[2] == REFERENCE_COMMIT else f"  (NOT the pinned {REFERENCE_COMMIT})"
        print(f"reference: patel-shivam/locus_code_release @ {reference[2]}{flag}")
    print(
        f"CPU bf16 units: {cpu_has_bf16()} -> low_precision='auto' chooses {inference_precision('cpu', 'auto')}; "
        f"'library' = fp32 (low_precision=False), 'library bf16' = low_precision=True"
    )
    print(
        f"torch {torch.__version__}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, "
        f"best and median of {args.repeats} after a warm-up, impls alternating"
    )
    torch.set_num_threads(1)
    cases, diffs, flops = inference_cases(reference)
    for k, v in diffs.items():
        print(f"max |diff| {k}: {v:.1e}")
    result = {
        "reference_commit": reference[2] if reference else None,
        "diffs": diffs,
        "gflop": flops,
        "cpu_has_bf16": cpu_has_bf16(),
        "precision_auto": inference_precision("cpu", "auto"),
        "torch": torch.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "runs": {},
    }
    for t in threads:
        torch.set_num_threads(t)
        peak = peak_matmul_gflops()
        run = {"peak_gflops_start": peak}
        for task in ("embed", "score"):
            run[task] = measure_alternately(cases[task], args.repeats)
        run["peak_gflops_end"] = peak_matmul_gflops()
        peak = max(peak, run["peak_gflops_end"])
        if not args.skip_train:
            run["train"] = training(args.train_repeats, args.train_epochs, t, args.before)
            flops["train_epoch"] = run["train"].get("gflop_per_epoch")
        result["runs"][t] = run
        print(
            f"\n{t} thread(s): fp32 matmul limit {peak:.0f} GFLOP/s (2048^3, best of 5 by CPU time; start "
            f"{run['peak_gflops_start']:.0f}, end {run['peak_gflops_end']:.0f})"
        )
        print(
            f"{'task':<40}{'impl':<13}{'best':>9}{'median':>9}{'cpu best':>9}{'vs ref':>8}{'cpu vs ref':>11}"
            f"{'peak MB':>8}{'GFLOP/s':>8}{'x limit':>8}"
        )
        tasks = [
            ("embed", f"(a) embed {M} x {N_ANCHORS} evaluations"),
            ("score", f"(b) score {Q_SCORE} q x {M} models"),
        ]
        for task, label in tasks:
            ref = run[task].get("reference", run[task]["library"])
            for impl, r in run[task].items():
                rate = flops[task] / r["cpu_best"] if impl.startswith("library") else None
                print(
                    f"{label:<40}{impl:<13}{r['best']:>8.3f}s{r['median']:>8.3f}s{r['cpu_best']:>8.3f}s"
                    f"{ref['best'] / r['best']:>7.2f}x{ref['cpu_best'] / r['cpu_best']:>10.2f}x{r['peak_mb']:>8.0f}"
                    + (f"{rate:>8.0f}{peak / rate:>7.1f}x" if rate else "")
                )
                label = ""
        if "train" in run:
            tr = run["train"]
            lib = tr["library"]["best"]
            for impl in ("library", "before"):
                if impl in tr:
                    r = tr[impl]
                    g = flops.get("train_epoch")
                    rate = g / r["cpu_best"] if (g and impl == "library") else None
                    print(
                        f"{'(c) train epoch ' + str(M) + ' x ' + str(N_ANCHORS) if impl == 'library' else '':<40}"
                        f"{impl:<13}{r['best']:>8.2f}s{r['median']:>8.2f}s{r['cpu_best']:>8.2f}s"
                        f"{r['best'] / lib:>7.2f}x{r['cpu_best'] / tr['library']['cpu_best']:>10.2f}x{'':>8}"
                        + (f"{rate:>8.0f}{peak / rate:>7.1f}x" if rate else "")
                    )
        result["runs"][t]["peak_gflops"] = peak
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for run in result["runs"].values():
        for task in ("embed", "score"):
            for r in run[task].values():
                r["times"], r["cpu_times"] = [round(x, 4) for x in r["times"]], [round(x, 4) for x in r["cpu_times"]]
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {args.out}; GFLOP counted: {json.dumps({k: round(v, 1) for k, v in flops.items() if v})}")


if __name__ == "__main__":
    main()
