#!/usr/bin/env python3
"""Chapter 8 benchmark: the small Transformer against Chapter 7's Bahdanau model, on the
course's date task, on the CPU.

    .venv/bin/python bench/transformer.py [--part clock race norm init info lists search recipe speed]
                                          [--seconds 60]
                                          [--threads 2] [--seeds 0 1 2] [--save] [--out DIR]

``clock`` (the targets of the chapter): each model trains for ``--seconds`` of training
time per seed (evaluations are not counted, as in ``bench/bahdanau.py``) with
:func:`attention_course.transformer.train_scheduled`: the same kind of batches, loss and
clipping as Chapter 7's ``train_model``, Adam with a 100-step warm-up and a cosine decay to 0
at the end of the time budget, each model with its own peak learning rate and batch size
(``SETTINGS``). Every few steps the exact match on the 1 000 validation pairs is recorded.
Printed side by side: the training time and the step at which each seed first reached 95 % on
the validation set, and the final exact match on the 2 000 test sources, mean and range over
the seeds. Under load (other programs on the machine) a time budget buys fewer steps, and with
2 threads far fewer: the load average at the start of each run is recorded.

``race``: the same, with a budget of steps instead of seconds (``SETTINGS[...]["steps"]``, what
each model ran in 60 s in an earlier clock run on a quiet machine; the shipped clock run averaged
3 375 and 1 468 steps, so these budgets are 12 to 13 % more), so that the curves against steps and the spread over
seeds do not depend on the load; the training time is recorded all the same.

How the Transformer's settings were chosen: by one-seed trials (batch size, heads, layers,
width, embedding start, learning-rate schedule) on a machine shared with other jobs, whose logs
are not shipped. What the shipped CSVs show of them (validation exact match): in ``search``
(``ch08_search.csv``, seed 0) batch 32 at a peak of 3e-3 is the Transformer's best cell, 93.4 %
after 102 400 training pairs; in ``init`` (``ch08_init.csv``, 800 steps, seeds 0-2) the chapter's
settings reach 63.0 % on average, 57.7 % with the larger embedding start and 48.2 % with a
constant learning rate instead of the cosine.

``norm``: pre-LN against post-LN. The chapter's Transformer, deepened to ``--norm-layers``
layers, trained with ``norm_first=True`` and ``False`` at the same peak learning rates (``--norm-lrs``, no
warm-up, cosine decay over ``--norm-steps`` steps) per seed; the training loss is
recorded every 10 steps. Also the gradient norm of every block's parameters at
initialisation (``--grad-layers`` deep), for one batch of 128 training pairs.

``info``: Chapter 7's information experiment (the list task: 1 to 4 dates in one source, with
or without filler words) repeated with the Transformer, on the very data and grid of
``bench/ch07_experiment.py`` (imported from it), trained for the same number of steps.

``lists``: the information-and-length experiment with both models trained alike (what the chapter
shows; ``info`` above is the older, Transformer-only version): Chapter 7's list task and grid,
the same batches for both models of a seed, ``tf.train_scheduled`` with each model's peak
learning rate (``LIST_LR``), a 100-step warm-up and a cosine over ``--lists-steps`` steps, the
validation share of dates right every ``--lists-eval-every`` steps for both, the grid at
``--lists-grid-at``. The full run, 3 seeds, one after another on one thread::

    .venv/bin/python bench/transformer.py --part lists --threads 1 --seeds 0 1 2 --save

(2 400 steps of 64 pairs.) On 2026-11-27 the seeds ran in three sessions beside other jobs, and the
shipped CSVs hold all three: training took 975 to 2 753 s per model (``train_seconds`` in
``ch08_lists_runs.csv``), the wall time more, for the evaluations (the Transformer's greedy
decoding above all). Longer training, the Transformer alone (shipped as ``ch08_lists_long_*.csv``,
seed 0, 2 747 s of training)::

    .venv/bin/python bench/transformer.py --part lists --threads 1 --seeds 0 --lists-models transformer \\
        --lists-steps 4800 --lists-grid-at 1600 3200 4800 --save --out DIR

``search``: the same small hyperparameter search for both models: peak learning rate 1e-3, 3e-3,
1e-2 by batch 32 and 128, every run on the same number of training pairs (``--search-pairs``),
warm-up and cosine as in the race; ``ch08_search.csv``.

``recipe``: the paper's dropout (0.1) and label smoothing (0.1), each alone and both, on the race's
Transformer with its settings and step budget; ``ch08_recipe.csv``.

``speed``: the cost of one training step (forward, backward, Adam; batch ``--speed-batch``) of
both models against the length of random sources and targets (``--speed-lengths``), the two
models alternating within one run so that their ratio is measured under the same load; median of
``--speed-repeats`` steps after one warm-up step, tokens per second, the load average.

``--save`` writes what the chapter loads into ``attention_course/pretrained/``:
``ch08_transformer.pt`` and ``ch08_bahdanau.pt`` (written by ``race`` only: the first seed's
model of each kind after its fixed number of steps, float16; ``--race-models bahdanau`` retrains
only the Bahdanau model; the accuracies printed are those of the rounded weights, so the shipped
model does not depend on the load of the machine; ``clock`` writes only its two CSVs),
``ch08_clock.csv`` and ``ch08_race.csv`` (curves of every seed and model),
``ch08_clock_summary.csv`` and ``ch08_race_summary.csv``, ``ch08_norm.csv``, ``ch08_grad_norms.csv``, ``ch08_init.csv``
(``init``: the embedding start and the learning-rate decay switched off in turn, ``--init-steps``
steps per seed), ``ch08_information.csv``,
``ch08_lists_curves.csv``, ``ch08_lists_grid.csv``, ``ch08_lists_runs.csv`` (``lists``, rewritten after every
run), ``ch08_speed.csv`` (``speed``), ``ch08_measured.txt`` (when, on what, under which load). Timings depend on the machine and on
what else runs on it; the step counts do not.
"""
import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from _common import ROOT, write_csv  # bench/_common.py; puts the repository root on sys.path
from attention_course import translation as tr
from attention_course import transformer as tf

TRANSFORMER = {"d_model": 64, "num_heads": 4, "num_layers": 2, "d_ff": 128}
BAHDANAU = {"embed_size": 32, "num_hiddens": 64}      # bench/bahdanau.py's model
# Peak learning rate, batch size and evaluation interval (steps) of each model. The Bahdanau model
# takes bench/bahdanau.py's default learning rate and batch (not Chapter 7's: Chapter 7 trains it
# at a constant 5e-3 on batches of 64), unsearched; the Transformer's were chosen by the trials
# listed in the module docstring.
SETTINGS = {"transformer": {"lr": 3e-3, "batch_size": 32, "eval_every": 200, "clock_eval_every": 400, "steps": 3800},
            "bahdanau": {"lr": 1e-2, "batch_size": 128, "eval_every": 50, "clock_eval_every": 100, "steps": 1650}}
# "clock_eval_every": the clock run evaluates half as often (evaluations are not training time, but
# they take wall time: 3 seeds x 2 models then stay under 9 minutes on 2 quiet cores).
# "steps": the step budget of ``--part race`` (and of its cosine schedule): what each model ran in
# 60 s of training with 2 threads on a quiet machine (``--part clock``, 2026-11-23: 3 825 and 1 663).
TARGET = 0.95


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def build(name: str, seed: int, **transformer_options):
    torch.manual_seed(seed)
    if name == "transformer":
        return tf.build_transformer(**TRANSFORMER, **transformer_options)
    return tr.build_model(attention=True, **BAHDANAU)


def rounded(model) -> dict:
    """Round-trip the weights through float16, as they are shipped."""
    state = {k: v.half() for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return state


def race(args, data, by_time: bool) -> dict:
    """Both models, every seed: a budget of ``args.seconds`` of training time (``by_time``) or of
    each model's ``SETTINGS[...]["steps"]`` optimiser steps; the cosine follows the budget."""
    curves, summary, shipped = [], [], {}
    for seed in args.seeds:
        for name in args.race_models:
            model = build(name, seed)
            settings = SETTINGS[name]
            lr = settings["lr"]
            start_load = load()
            budget = {"max_seconds": args.seconds} if by_time else {"max_steps": settings["steps"]}
            history = tf.train_scheduled(model, data["train"], val=data["val"], **budget,
                                         batch_size=settings["batch_size"], lr=lr, warmup=100,
                                         eval_every=settings["clock_eval_every" if by_time else "eval_every"],
                                         seed=seed, progress="none")
            state = rounded(model)
            test = tr.exact_match(model, data["test"]).float().mean().item()
            reached = next((h for h in history if h["val_acc"] >= TARGET), None)
            for h in history:
                curves.append({"seed": seed, "model": name, "step": h["step"], "seconds": round(h["seconds"], 2),
                               "loss": round(h["loss"], 4), "val_acc": round(h["val_acc"], 4)})
            summary.append({"seed": seed, "model": name, "lr": lr, "batch_size": settings["batch_size"],
                            "parameters": tf.count_parameters(model), "steps": history[-1]["step"],
                            "seconds": round(history[-1]["seconds"], 1),
                            "seconds_to_95": round(reached["seconds"], 1) if reached else "",
                            "step_to_95": reached["step"] if reached else "",
                            "best_val": round(max(h["val_acc"] for h in history), 4),
                            "test_exact_match": round(test, 4), "load_at_start": start_load})
            s = summary[-1]
            when = f"95 % after {s['seconds_to_95']} s (step {s['step_to_95']})" if reached \
                else f"95 % not reached (best {100 * s['best_val']:.1f} %)"
            print(f"  seed {seed} {name:11s}: {s['steps']:5d} steps in {s['seconds']:5.1f} s, {when}, "
                  f"test exact match {100 * test:.2f} %  (load {start_load})", flush=True)
            if seed == args.seeds[0]:
                shipped[name] = state
    print(f"\n{'':22s}{'Transformer':>24s}{'Bahdanau (ch. 7)':>24s}")

    def column(name, key, fmt):
        values = [s[key] for s in summary if s["model"] == name and s[key] != ""]
        missed = sum(1 for s in summary if s["model"] == name and s[key] == "")
        if not values:
            return f"{'never':>24s}"
        text = f"{fmt(statistics.mean(values))} ({fmt(min(values))}-{fmt(max(values))})"
        return f"{text + (f' +{missed} never' if missed else ''):>24s}"

    for label, key, fmt in (("parameters", "parameters", lambda v: f"{v:.0f}"),
                            ("steps in the budget", "steps", lambda v: f"{v:.0f}"),
                            ("seconds to 95 % (val)", "seconds_to_95", lambda v: f"{v:.1f}"),
                            ("steps to 95 % (val)", "step_to_95", lambda v: f"{v:.0f}"),
                            ("test exact match", "test_exact_match", lambda v: f"{100 * v:.2f}")):
        print(f"{label:22s}{column('transformer', key, fmt)}{column('bahdanau', key, fmt)}")
    budget = f"{args.seconds:.0f} s of training" if by_time else "the step budgets of SETTINGS"
    print(f"(mean over seeds {args.seeds}, range in brackets; budget {budget} each)")
    return {"curves": curves, "summary": summary, "shipped": shipped}


SEARCH_LRS = [1e-3, 3e-3, 1e-2]
SEARCH_BATCHES = [32, 128]


def search(args, data) -> list:
    """The same small search for both models: peak learning rate ``SEARCH_LRS`` by batch size
    ``SEARCH_BATCHES``, each run on the same number of training pairs (``--search-pairs``, so a
    batch of 128 takes a quarter of the steps of a batch of 32), with the race's recipe (100-step
    warm-up, cosine to 0 over the run, clipping 1). The validation exact match is read at four
    equal shares of the run; the training time is recorded too."""
    rows = []
    for seed in args.seeds:
        for name in ("transformer", "bahdanau"):
            for batch_size in SEARCH_BATCHES:
                steps = args.search_pairs // batch_size
                for lr in SEARCH_LRS:
                    model = build(name, seed)
                    history = tf.train_scheduled(model, data["train"], val=data["val"], max_steps=steps,
                                                 batch_size=batch_size, lr=lr, warmup=100,
                                                 eval_every=steps // 4, seed=seed)
                    rows += [{"seed": seed, "model": name, "batch_size": batch_size, "lr": lr, "step": h["step"],
                              "pairs": h["step"] * batch_size, "seconds": round(h["seconds"], 1),
                              "val_acc": round(h["val_acc"], 4)} for h in history]
                    print(f"  seed {seed} {name:11s} batch {batch_size:3d} lr {lr:.0e}: val exact match "
                          + " ".join(f"{100 * h['val_acc']:.1f}" for h in history)
                          + f" %, {history[-1]['seconds']:.0f} s  (load {load()})", flush=True)
                    if args.save:
                        write_csv(args.out / "ch08_search.csv", rows)
    return rows


RECIPE = (("none (the chapter's)", 0.0, 0.0), ("dropout 0.1", 0.1, 0.0), ("label smoothing 0.1", 0.0, 0.1),
          ("both", 0.1, 0.1))


def recipe(args, data) -> list:
    """The paper's regularisers measured on this task: the race's Transformer (``SETTINGS``, its
    step budget) trained with dropout 0.1, label smoothing 0.1, both, and neither; validation
    exact match every ``eval_every`` steps and test exact match at the end."""
    rows = []
    settings = SETTINGS["transformer"]
    for seed in args.seeds:
        for variant, dropout, smoothing in RECIPE:
            model = build("transformer", seed, dropout=dropout)
            history = tf.train_scheduled(model, data["train"], val=data["val"], max_steps=settings["steps"],
                                         batch_size=settings["batch_size"], lr=settings["lr"], warmup=100,
                                         eval_every=settings["eval_every"], seed=seed, label_smoothing=smoothing)
            test = tr.exact_match(model, data["test"]).float().mean().item()
            rows += [{"seed": seed, "variant": variant, "dropout": dropout, "label_smoothing": smoothing,
                      "step": h["step"], "seconds": round(h["seconds"], 1), "val_acc": round(h["val_acc"], 4),
                      "test_exact_match": round(test, 4) if h is history[-1] else ""} for h in history]
            reached = next((h["step"] for h in history if h["val_acc"] >= TARGET), "never")
            print(f"  seed {seed} {variant:22s}: 95 % at step {reached}, best val "
                  f"{100 * max(h['val_acc'] for h in history):.1f} %, test {100 * test:.2f} %  (load {load()})",
                  flush=True)
            if args.save:
                write_csv(args.out / "ch08_recipe.csv", rows)
    return rows


def block_grad_norms(model, batch) -> list:
    """Gradient norm of each block's parameters for one batch (no optimiser step)."""
    model.zero_grad()
    src, src_lens, tgt_in, tgt_out = batch
    logits, _ = model(src, src_lens, tgt_in)
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=0).backward()
    rows = []
    for stack in ("encoder", "decoder"):
        for i, block in enumerate(getattr(model, stack)):
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in block.parameters())).item()
            rows.append({"stack": stack, "layer": i, "grad_norm": round(norm, 5)})
    return rows


def norm_experiment(args, data) -> tuple:
    config = dict(TRANSFORMER, num_layers=args.norm_layers)
    curves, grads = [], []
    generator = torch.Generator().manual_seed(123)
    index = torch.randperm(len(data["train"]), generator=generator)[:128]
    batch = data["train"].batch(index)
    for seed in args.seeds:
        for norm_first in (True, False):
            name = "pre-LN" if norm_first else "post-LN"
            torch.manual_seed(seed)
            model = tf.build_transformer(**dict(TRANSFORMER, num_layers=args.grad_layers), norm_first=norm_first)
            grads += [{"seed": seed, "norm": name, **row} for row in block_grad_norms(model, batch)]
            for lr in args.norm_lrs:
                torch.manual_seed(seed)
                model = tf.build_transformer(**config, norm_first=norm_first)
                history = tf.train_scheduled(model, data["train"], max_steps=args.norm_steps, lr=lr, warmup=0,
                                             batch_size=SETTINGS["transformer"]["batch_size"], eval_every=10,
                                             seed=seed, progress="none")
                curves += [{"seed": seed, "norm": name, "lr": lr, "step": h["step"], "loss": round(h["loss"], 4)}
                           for h in history]
                tail = [h["loss"] for h in history[-5:]]
                print(f"  seed {seed} {name:7s} lr {lr:g}: loss over the last 50 steps "
                      f"{statistics.mean(tail):.4f}  (load {load()})", flush=True)
    print("\nmean training loss over the last 50 steps (mean over seeds, range)")
    for lr in args.norm_lrs:
        parts = []
        for name in ("pre-LN", "post-LN"):
            finals = []
            for seed in args.seeds:
                rows = [c["loss"] for c in curves if c["seed"] == seed and c["norm"] == name and c["lr"] == lr]
                finals.append(statistics.mean(rows[-5:]))
            parts.append(f"{name} {statistics.mean(finals):.4f} ({min(finals):.4f}-{max(finals):.4f})")
        print(f"  lr {lr:g}: " + " | ".join(parts))
    print("gradient norm per block at initialisation (seed mean): encoder 0..L-1 | decoder 0..L-1")
    for name in ("pre-LN", "post-LN"):
        parts = []
        for stack in ("encoder", "decoder"):
            values = [statistics.mean(g["grad_norm"] for g in grads if g["norm"] == name and g["stack"] == stack
                                      and g["layer"] == i) for i in range(args.grad_layers)]
            parts.append(" ".join(f"{v:.3f}" for v in values))
        print(f"  {name:7s}: " + " | ".join(parts))
    return curves, grads


def init_experiment(args, data) -> list:
    """Two choices the chapter makes, each switched off in turn: the start of the embedding tables,
    N(0, 1/d_model^2), against N(0, 1/d_model) (the scaled embeddings then match the positional
    table in size); and the cosine decay of the learning rate, against a constant one."""
    rows = []
    d = TRANSFORMER["d_model"]
    variants = (("chapter", 1.0 / d, True), ("larger embeddings", d ** -0.5, True),
                ("constant learning rate", 1.0 / d, False))
    for seed in args.seeds:
        for name, std, decay in variants:
            model = build("transformer", seed)
            for table in (model.src_embedding, model.tgt_embedding):
                torch.nn.init.normal_(table.weight, std=std, generator=torch.Generator().manual_seed(seed))
            history = tf.train_scheduled(model, data["train"], val=data["val"], max_steps=args.init_steps,
                                         batch_size=SETTINGS["transformer"]["batch_size"],
                                         lr=SETTINGS["transformer"]["lr"], warmup=100, decay=decay,
                                         eval_every=args.init_steps // 4, seed=seed)
            rows += [{"seed": seed, "variant": name, "step": h["step"], "val_acc": round(h["val_acc"], 4)}
                     for h in history]
            print(f"  seed {seed} {name:22s}: val exact match "
                  + " ".join(f"{100 * h['val_acc']:.1f}" for h in history) + f" %  (load {load()})", flush=True)
    return rows


def information(args) -> list:
    """Chapter 7's list task and grid, with the Transformer (bench/ch07_experiment.py's data:
    1 to 4 dates, filler 0, 20, 40 or 60 characters, 200 new sources per cell), trained like
    Chapter 7's attention model: ``--info-steps`` steps of ``--info-batch`` pairs."""
    import argparse as _argparse
    sys.path.insert(0, str(ROOT / "bench"))
    import ch07_experiment as ch07  # noqa: E402 - Chapter 7's experiment defines the data and the grid
    spec = _argparse.Namespace(max_dates=4, fillers=[0, 20, 40, 60], test_size=args.info_test_size,
                               num_val=400, num_train=args.info_train)
    data = ch07.make_data(spec)
    train = ch07.encode(data["train"])
    sources = [s for s, _ in data["train"]] + [s for pairs in data["grid"].values() for s, _ in pairs]
    max_len = max(128, max(map(len, sources)) + 1, int(train.tgt_in.shape[1]) + 1)
    rows = []
    for seed in args.seeds:
        torch.manual_seed(seed)
        model = tf.build_transformer(tgt_vocab=tr.LIST_TARGET_VOCAB, max_len=max_len, **TRANSFORMER)
        start = time.process_time()
        tf.train_scheduled(model, train, max_steps=args.info_steps, batch_size=args.info_batch,
                           lr=SETTINGS["transformer"]["lr"], eval_every=args.info_steps, seed=seed)
        seconds = time.process_time() - start
        model.eval()
        for (n, filler), pairs in data["grid"].items():
            dates, exact = ch07.evaluate(model, pairs)
            lengths = torch.tensor([len(s) for s, _ in pairs], dtype=torch.float)
            rows.append({"seed": seed, "model": "transformer", "steps": args.info_steps, "n_dates": n,
                         "filler": filler, "group": "all", "count": len(pairs),
                         "mean_length": round(lengths.mean().item(), 2),
                         "date_acc": round(dates.mean().item(), 4), "exact_match": round(exact.mean().item(), 4)})
        line = "  ".join(f"n={r['n_dates']} {100 * r['date_acc']:5.1f}%" for r in rows
                         if r["seed"] == seed and r["filler"] == 0)
        print(f"  seed {seed}: {seconds:.0f} s CPU, dates right without filler: {line}", flush=True)
    return rows


LIST_LR = {"transformer": SETTINGS["transformer"]["lr"], "bahdanau": 5e-3}   # 5e-3: Chapter 7's list task


def lists(args) -> tuple:
    """Both models on Chapter 7's list task, trained alike and to a longer budget than ``info``:
    ``tf.train_scheduled`` (Adam, 100-step warm-up, cosine to 0 at ``--lists-steps``, clipping 1),
    batches of ``--lists-batch`` pairs drawn in the same order for both models of a seed, each
    model's peak learning rate (``LIST_LR``). Every ``--lists-eval-every`` steps: the share of
    dates right and the exact match on ``--lists-val`` validation sources (half without filler,
    half with), and the training time so far; at every step of ``--lists-grid-at``: the whole grid
    of ``bench/ch07_experiment.py`` (``--lists-grid-size`` sources per cell). The runs go seed by
    seed, Transformer first, and the CSVs are rewritten after every run (a cut-short run keeps the
    seeds it finished)."""
    import argparse as _argparse
    sys.path.insert(0, str(ROOT / "bench"))
    import ch07_experiment as ch07  # noqa: E402 - Chapter 7's experiment defines the data and the grid
    spec = _argparse.Namespace(max_dates=4, fillers=[0, 20, 40, 60], test_size=args.lists_grid_size,
                               num_val=400, num_train=args.info_train)
    data = ch07.make_data(spec)
    half = args.lists_val // 2
    val = data["val"][:half] + data["val"][200:200 + half]     # make_data: 200 without filler, then 200 with
    train = ch07.encode(data["train"])
    sources = [s for s, _ in data["train"]] + [s for pairs in data["grid"].values() for s, _ in pairs]
    max_len = max(128, max(map(len, sources)) + 1, int(train.tgt_in.shape[1]) + 1)
    curves, grid_rows, runs = [], [], []
    for seed in args.seeds:
        for name in args.lists_models:
            torch.manual_seed(seed)
            if name == "transformer":
                model = tf.build_transformer(tgt_vocab=tr.LIST_TARGET_VOCAB, max_len=max_len, **TRANSFORMER)
            else:
                model = tr.build_model(attention=True, tgt_vocab=tr.LIST_TARGET_VOCAB, **BAHDANAU)
            clock = {"seconds": 0.0}

            def on_eval(m, step, name=name, seed=seed):
                dates, exact = ch07.evaluate(m, val)
                if step in args.lists_grid_at:
                    for (n, filler), pairs in data["grid"].items():
                        d, e = ch07.evaluate(m, pairs)
                        grid_rows.append({"seed": seed, "model": name, "step": step, "seconds": None,
                                          "n_dates": n, "filler": filler, "count": len(pairs),
                                          "mean_length": round(sum(len(s) for s, _ in pairs) / len(pairs), 2),
                                          "date_acc": round(d.mean().item(), 4),
                                          "exact_match": round(e.mean().item(), 4)})
                return {"val_date_acc": round(dates.mean().item(), 4),
                        "val_exact_match": round(exact.mean().item(), 4)}

            start_load = load()
            history = tf.train_scheduled(model, train, max_steps=args.lists_steps, batch_size=args.lists_batch,
                                         lr=LIST_LR[name], warmup=100, eval_every=args.lists_eval_every,
                                         seed=seed, evaluate=on_eval)
            seconds_at = {h["step"]: round(h["seconds"], 1) for h in history}
            for row in grid_rows:
                if row["seed"] == seed and row["model"] == name:
                    row["seconds"] = seconds_at[row["step"]]
            curves += [{"seed": seed, "model": name, "step": h["step"], "seconds": round(h["seconds"], 1),
                        "loss": round(h["loss"], 4), "val_date_acc": h["val_date_acc"],
                        "val_exact_match": h["val_exact_match"]} for h in history]
            runs.append({"seed": seed, "model": name, "steps": history[-1]["step"], "batch_size": args.lists_batch,
                         "lr": LIST_LR[name], "parameters": tf.count_parameters(model),
                         "train_seconds": round(history[-1]["seconds"], 1), "load_at_start": start_load,
                         "load_at_end": load()})
            line = " ".join(f"{h['step']}:{100 * h['val_date_acc']:.1f}" for h in history)
            print(f"  seed {seed} {name:11s}: {history[-1]['seconds']:6.1f} s of training (load {start_load}), "
                  f"val dates right by step {line}", flush=True)
            if args.save:
                write_csv(args.out / "ch08_lists_curves.csv", curves)
                write_csv(args.out / "ch08_lists_grid.csv", grid_rows)
                write_csv(args.out / "ch08_lists_runs.csv", runs)
    print("\nshare of dates right on the grid, %, mean over seeds (range): one date by filler | no filler by dates")
    for name in ("transformer", "bahdanau"):
        for step in args.lists_grid_at:
            parts = []
            for n, filler in [(1, f) for f in (0, 20, 40, 60)] + [(n, 0) for n in (2, 3, 4)]:
                sel = [100 * r["date_acc"] for r in grid_rows if r["model"] == name and r["step"] == step
                       and r["n_dates"] == n and r["filler"] == filler]
                if sel:
                    parts.append(f"{n}d/{filler}f {statistics.mean(sel):.1f} ({min(sel):.1f}-{max(sel):.1f})")
            print(f"  {name:11s} step {step:5d}: " + " | ".join(parts))
    return curves, grid_rows, runs


def speed(args) -> list:
    """Training cost against sequence length, both models in one run: for every length L of
    ``--speed-lengths``, a batch of ``--speed-batch`` random sources and targets of L tokens each,
    one training step (forward, backward, Adam) timed ``--speed-repeats`` times after one warm-up
    step, the two models alternating so that both see the same load. Recorded: the median
    seconds per step, the tokens per second (source and target tokens), the ratio of the two
    models, the load average. The models are the chapter's (``TRANSFORMER``, ``BAHDANAU``)."""
    rows = []
    generator = torch.Generator().manual_seed(0)
    models = {name: build(name, 0) for name in ("transformer", "bahdanau")}
    if max(args.speed_lengths) + 2 > models["transformer"].positions.shape[0]:
        torch.manual_seed(0)
        models["transformer"] = tf.build_transformer(max_len=max(args.speed_lengths) + 2, **TRANSFORMER)
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-3) for name, m in models.items()}
    for length in args.speed_lengths:
        b = args.speed_batch
        src = torch.randint(4, len(tr.SOURCE_VOCAB), (b, length), generator=generator)
        tgt = torch.randint(4, len(tr.TARGET_VOCAB), (b, length + 1), generator=generator)
        src_lens = torch.full((b,), length)
        times = {name: [] for name in models}
        for repeat in range(args.speed_repeats + 1):
            for name, model in models.items():
                start = time.perf_counter()
                logits, _ = model(src, src_lens, tgt[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1))
                optimizers[name].zero_grad()
                loss.backward()
                optimizers[name].step()
                if repeat:                     # the first step warms up the allocator and caches
                    times[name].append(time.perf_counter() - start)
        row = {"length": length, "batch_size": b, "load": load()}
        for name in models:
            seconds = statistics.median(times[name])
            row[f"{name}_seconds"] = round(seconds, 5)
            row[f"{name}_tokens_per_second"] = round(2 * b * length / seconds)
        row["ratio_bahdanau_over_transformer"] = round(row["bahdanau_seconds"] / row["transformer_seconds"], 3)
        rows.append(row)
        print(f"  L = {length:4d}: Transformer {1000 * row['transformer_seconds']:8.1f} ms/step "
              f"({row['transformer_tokens_per_second']:7d} tokens/s) | Bahdanau {1000 * row['bahdanau_seconds']:8.1f} "
              f"ms/step ({row['bahdanau_tokens_per_second']:7d} tokens/s) | GRU/Transformer "
              f"{row['ratio_bahdanau_over_transformer']:.2f}  (load {row['load']})", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", nargs="+", default=["clock"], choices=["clock", "race", "norm", "init", "info", "lists", "speed",
                                                                   "search", "recipe"])
    parser.add_argument("--seconds", type=float, default=60.0, help="training time per race run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--norm-layers", type=int, default=4)
    parser.add_argument("--norm-lrs", type=float, nargs="+", default=[1e-3, 3e-3])
    parser.add_argument("--norm-steps", type=int, default=400)
    parser.add_argument("--init-steps", type=int, default=1600)
    parser.add_argument("--grad-layers", type=int, default=6, help="depth of the models whose gradient "
                        "norms at initialisation are measured")
    parser.add_argument("--info-steps", type=int, default=2000)
    parser.add_argument("--info-batch", type=int, default=64)
    parser.add_argument("--info-train", type=int, default=40000)
    parser.add_argument("--info-test-size", type=int, default=200)
    parser.add_argument("--search-pairs", type=int, default=102400, help="training pairs per search run")
    parser.add_argument("--lists-steps", type=int, default=2400)
    parser.add_argument("--lists-batch", type=int, default=64)
    parser.add_argument("--lists-eval-every", type=int, default=200)
    parser.add_argument("--lists-val", type=int, default=200, help="validation sources, half with filler")
    parser.add_argument("--lists-grid-at", type=int, nargs="+", default=[800, 1600, 2400])
    parser.add_argument("--lists-models", nargs="+", choices=["transformer", "bahdanau"],
                        default=["transformer", "bahdanau"], help="which models the list task trains (in this order)")
    parser.add_argument("--lists-grid-size", type=int, default=100, help="sources per grid cell")
    parser.add_argument("--speed-lengths", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    parser.add_argument("--speed-batch", type=int, default=32)
    parser.add_argument("--speed-repeats", type=int, default=5)
    parser.add_argument("--race-models", nargs="+", choices=["transformer", "bahdanau"],
                        default=["transformer", "bahdanau"],
                        help="which models clock and race train (both by default)")
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--out", type=Path, default=tr.PRETRAINED_DIR,
                        help="where --save writes (one folder per process when seeds run side by side)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    header = (f"{datetime.date.today().isoformat()}: {os.cpu_count()} cores, torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads, load average at start {load()}")
    print(header + " (other programs slow training down)")
    data = {name: tr.encode_split(pairs) for name, pairs in tr.make_dataset(seed=0).items()}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    notes = [header]
    for part, by_time in (("clock", True), ("race", False)):
        if part not in args.part:
            continue
        budget = f"{args.seconds:.0f} s of training" if by_time else "a fixed number of steps"
        print(f"\n{part}: Transformer {TRANSFORMER} against Bahdanau {BAHDANAU}, {SETTINGS}, {budget} each")
        result = race(args, data, by_time)
        notes.append(f"{part}: {budget} per run, seeds {args.seeds}, threads {args.threads}, "
                     f"load average at the end {load()}")
        if args.save:
            write_csv(out / f"ch08_{part}.csv", result["curves"])
            write_csv(out / f"ch08_{part}_summary.csv", result["summary"])
            if not by_time:      # the shipped models: a fixed number of steps, whatever the load
                configs = {"transformer": dict(TRANSFORMER), "bahdanau": dict(BAHDANAU)}
                for name, state in result["shipped"].items():
                    torch.save({**state, "_config": configs[name]}, out / f"ch08_{name}.pt")
    if "norm" in args.part:
        print(f"\nnorm: {args.norm_layers} layers, pre-LN against post-LN, lrs {args.norm_lrs}, "
              f"{args.norm_steps} steps")
        curves, grads = norm_experiment(args, data)
        notes.append(f"norm: {args.norm_layers} layers, {args.norm_steps} steps, lrs {args.norm_lrs}")
        if args.save:
            write_csv(out / "ch08_norm.csv", curves)
            write_csv(out / "ch08_grad_norms.csv", grads)
    if "init" in args.part:
        print(f"\ninit: the embedding start and the learning-rate decay, {args.init_steps} steps")
        rows = init_experiment(args, data)
        notes.append(f"init: {args.init_steps} steps")
        if args.save:
            write_csv(out / "ch08_init.csv", rows)
    if "search" in args.part:
        print(f"\nsearch: both models, peak learning rates {SEARCH_LRS} by batch sizes {SEARCH_BATCHES}, "
              f"{args.search_pairs} training pairs per run")
        search(args, data)
        notes.append(f"search: {args.search_pairs} pairs per run, seeds {args.seeds}, threads {args.threads}, "
                     f"load average at the end {load()}")
    if "recipe" in args.part:
        print(f"\nrecipe: the Transformer with dropout and label smoothing, {SETTINGS['transformer']}")
        recipe(args, data)
        notes.append(f"recipe: seeds {args.seeds}, threads {args.threads}, load average at the end {load()}")
    if "info" in args.part:
        print(f"\ninfo: the list task, {args.info_steps} steps of {args.info_batch}")
        rows = information(args)
        notes.append(f"info: {args.info_steps} steps, batch {args.info_batch}")
        if args.save:
            write_csv(out / "ch08_information.csv", rows)
    if "lists" in args.part:
        print(f"\nlists: both models on the list task, {args.lists_steps} steps of {args.lists_batch}, "
              f"learning rates {LIST_LR}")
        lists(args)
        notes.append(f"lists: {args.lists_steps} steps of {args.lists_batch}, seeds {args.seeds}, "
                     f"threads {args.threads}, load average at the end {load()}")
    if "speed" in args.part:
        print(f"\nspeed: one training step against the length, batch {args.speed_batch}, "
              f"{torch.get_num_threads()} thread(s)")
        rows = speed(args)
        notes.append(f"speed: batch {args.speed_batch}, lengths {args.speed_lengths}, threads {args.threads}")
        if args.save:
            write_csv(out / "ch08_speed.csv", rows)
    if args.save:
        with open(out / "ch08_measured.txt", "a") as f:
            f.write("\n".join(notes) + "\n")
        print(f"\nwrote the results to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
