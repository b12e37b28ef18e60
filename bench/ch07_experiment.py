#!/usr/bin/env python3
"""Chapter 7's experiment: does a fixed-length summary fail with the *amount of
information* in the input, or with its *length*?

    .venv/bin/python bench/ch07_experiment.py [--seeds 0 1 2] [--jobs 2] [--save]

Task: the list task of :mod:`attention_course.translation` -- a source writes 1 to 4
dates (each in its own format and case), the target lists them as ISO dates
separated by ``;``. Half of the training sources also carry 1 to 60 characters of
filler words, which make a source longer without adding information.

Models: the chapter's GRU encoder-decoder with additive attention and the same model
without attention (:func:`attention_course.translation.build_model`, 32-dimensional
embeddings, 64 hidden units), trained with Adam (lr 5e-3) on batches of 64 for a
fixed number of optimiser steps: 2000 for both, and the baseline, which is about 2.5
times cheaper per step, on to 5000 (about the same CPU time as the attention
model's 2000). One seed = one initialisation and one batch order; the data are the
same for every seed and both models see the same batches. No wall-clock budget
anywhere: a run gives the same numbers on a fast or a loaded machine. One torch
thread per run; ``--jobs`` runs several runs side by side. The defaults (3 seeds)
take about 20 minutes of CPU time in all (the shipped ch07_runs.csv: 1188 s).

Evaluation grid (``--test-size`` = 200 new sources per cell, never seen in training):
number of dates 1..4 crossed with filler = 0, 20, 40, 60 characters, evaluated after
2000 steps (both models) and after 5000 (the baseline). Per cell: the share of dates
translated right (the k-th output date equal to the k-th target date), the exact
match of the whole output, and the mean source length. In the cells without filler,
the sources are also split at their median length into a "short" and a "long" half:
at the same information, the length then comes from the date formats alone
("3.3.1998" against "Tuesday, March 3, 1998").

``--save`` writes what the chapter loads:

* ``attention_course/pretrained/ch07_information.csv`` -- one row per seed, model,
  checkpoint and cell (and length half): ``seed, model, steps, n_dates, filler, group,
  count, mean_length, date_acc, exact_match``;
* ``attention_course/pretrained/ch07_training_curves.csv`` -- ``seed, model, step,
  loss, val_date_acc, val_exact_match`` every ``--eval-every`` steps on 400 validation
  sources drawn like the training data;
* ``attention_course/pretrained/ch07_runs.csv`` -- per run: steps, parameters,
  CPU seconds (for information only: the chapter prints no timing);
* ``attention_course/pretrained/ch07_lists_attention.pt`` and
  ``ch07_lists_baseline.pt`` -- the final weights of the first seed's two models
  (:func:`attention_course.translation.load_pretrained` with ``task="lists"``).
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from _common import write_csv  # bench/_common.py; puts the repository root on sys.path
from attention_course import translation as tr

CONFIG = {"embed_size": 32, "num_hiddens": 64}


def make_data(args) -> dict:
    """The same splits for every run: grid cells first, then validation, then training."""
    seen: set = set()
    grid = {}
    dates, most = (1, args.max_dates), max(args.fillers)
    for k, (n, filler) in enumerate((n, f) for n in range(1, args.max_dates + 1) for f in args.fillers):
        grid[n, filler] = tr.make_list_split(args.test_size, n, filler, seed=1000 + k, exclude=seen)
    half = args.num_val // 2
    val = (tr.make_list_split(half, dates, 0, seed=2, exclude=seen)
           + tr.make_list_split(args.num_val - half, dates, (1, most), seed=3, exclude=seen))
    half = args.num_train // 2
    train = (tr.make_list_split(half, dates, 0, seed=4, exclude=seen)
             + tr.make_list_split(args.num_train - half, dates, (1, most), seed=5, exclude=seen))
    return {"train": train, "val": val, "grid": grid}


def encode(pairs):
    return tr.encode_split(pairs, tgt_vocab=tr.LIST_TARGET_VOCAB)


def evaluate(model, pairs) -> tuple:
    """Date accuracy and exact match per example, for a list of pairs."""
    outputs = tr.greedy_outputs(model, encode(pairs), batch_size=250)
    targets = [t for _, t in pairs]
    dates = tr.list_date_accuracy(outputs, targets)
    exact = torch.tensor([o == t for o, t in zip(outputs, targets)], dtype=torch.float)
    return dates, exact


def evaluate_grid(model, grid: dict, seed: int, name: str, step: int) -> list:
    """CSV rows for every grid cell (and, without filler, its shorter and longer half)."""
    rows = []
    for (n, filler), pairs in grid.items():
        dates, exact = evaluate(model, pairs)
        lengths = torch.tensor([len(s) for s, _ in pairs], dtype=torch.float)
        groups = {"all": torch.ones(len(pairs), dtype=torch.bool)}
        if filler == 0:
            median = lengths.median()
            groups["short"], groups["long"] = lengths <= median, lengths > median
        for group, keep in groups.items():
            rows.append({"seed": seed, "model": name, "steps": step, "n_dates": n, "filler": filler,
                         "group": group, "count": int(keep.sum()),
                         "mean_length": round(lengths[keep].mean().item(), 2),
                         "date_acc": round(dates[keep].mean().item(), 4),
                         "exact_match": round(exact[keep].mean().item(), 4)})
    return rows


def run(job: tuple) -> dict:
    """Train and evaluate one (model, seed); returns rows for the CSVs and the state dict."""
    attention, seed, args = job
    torch.set_num_threads(1)
    name = "attention" if attention else "baseline"
    data = make_data(args)
    train = encode(data["train"])
    torch.manual_seed(seed)
    config = {"embed_size": args.embed_size, "num_hiddens": args.num_hiddens}
    model = tr.build_model(attention=attention, tgt_vocab=tr.LIST_TARGET_VOCAB, **config)

    steps = args.steps if attention else max(args.steps, args.baseline_steps)
    checkpoints = sorted({args.steps, steps})      # where the whole grid is evaluated
    rows = []

    def on_eval(m, step) -> dict:
        dates, exact = evaluate(m, data["val"])
        if step in checkpoints:
            rows.extend(evaluate_grid(m, data["grid"], seed, name, step))
        return {"val_date_acc": round(dates.mean().item(), 4), "val_exact_match": round(exact.mean().item(), 4)}

    start = time.process_time()
    history = tr.train_model(model, train, max_steps=steps, batch_size=args.batch_size,
                             lr=args.lr, eval_every=args.eval_every, seed=seed, evaluate=on_eval,
                             progress="bar" if args.jobs == 1 else "none")
    seconds = time.process_time() - start   # includes the evaluations
    if {r["steps"] for r in rows} != set(checkpoints):
        raise RuntimeError(f"--eval-every {args.eval_every} must divide every checkpoint {checkpoints}")
    curves = [{"seed": seed, "model": name, "step": h["step"], "loss": round(h["loss"], 4),
               "val_date_acc": h["val_date_acc"], "val_exact_match": h["val_exact_match"]}
              for h in history]
    summary = {"seed": seed, "model": name, "steps": history[-1]["step"],
               "parameters": sum(p.numel() for p in model.parameters()),
               "train_cpu_seconds": round(seconds, 1), "batch_size": args.batch_size, "lr": args.lr,
               **config}
    line = "  ".join(f"n={r['n_dates']} {100 * r['date_acc']:5.1f}%" for r in rows
                     if r["filler"] == 0 and r["group"] == "all" and r["steps"] == steps)
    print(f"{name:9s} seed {seed}: {seconds:6.1f} s CPU, dates right without filler: {line}", flush=True)
    return {"rows": rows, "curves": curves, "summary": summary,
            "state": {k: v.clone() for k, v in model.state_dict().items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", default=["attention", "baseline"],
                        choices=["attention", "baseline"])
    parser.add_argument("--steps", type=int, default=2000, help="training steps of every model")
    parser.add_argument("--baseline-steps", type=int, default=5000,
                        help="the baseline trains on to this many steps (it is cheaper per step); the "
                             "grid is evaluated at --steps and here")
    parser.add_argument("--embed-size", type=int, default=CONFIG["embed_size"])
    parser.add_argument("--num-hiddens", type=int, default=CONFIG["num_hiddens"])
    parser.add_argument("--max-dates", type=int, default=4)
    parser.add_argument("--fillers", type=int, nargs="+", default=[0, 20, 40, 60],
                        help="filler sizes of the test grid; training draws 1..max of them for half the sources")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--num-train", type=int, default=40000)
    parser.add_argument("--num-val", type=int, default=400)
    parser.add_argument("--test-size", type=int, default=200, help="sources per grid cell")
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--jobs", type=int, default=1, help="runs side by side (one thread each)")
    parser.add_argument("--save", action="store_true", help="write the CSVs and weights the chapter loads")
    parser.add_argument("--out", type=Path, default=tr.PRETRAINED_DIR)
    args = parser.parse_args()

    jobs = [(model == "attention", seed, args) for seed in args.seeds for model in args.models]
    print(f"{len(jobs)} runs of {args.steps} steps, batch {args.batch_size}, lr {args.lr}, "
          f"embed {args.embed_size}, hidden {args.num_hiddens}, dates 1-{args.max_dates}, fillers {args.fillers}, "
          f"{args.jobs} at a time, torch {torch.__version__}, {os.cpu_count()} cores")
    if args.jobs > 1:
        import multiprocessing
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(run, jobs, chunksize=1)
    else:
        results = [run(job) for job in jobs]

    rows = [r for res in results for r in res["rows"]]
    print("\nshare of dates right, % -- mean over seeds (lowest-highest); by dates: no filler; by filler: one date")
    for model in args.models:
        for steps in sorted({r["steps"] for r in rows if r["model"] == model}):
            for key, label in (("n_dates", "dates"), ("filler", "filler")):
                cells = range(1, args.max_dates + 1) if key == "n_dates" else args.fillers
                parts = []
                for c in cells:
                    sel = [r["date_acc"] for r in rows if r["model"] == model and r["group"] == "all"
                           and r["steps"] == steps and r[key] == c
                           and (r["filler"] == 0 if key == "n_dates" else r["n_dates"] == 1)]
                    parts.append(f"{c}: {100 * statistics.mean(sel):5.1f} ({100 * min(sel):.1f}-{100 * max(sel):.1f})")
                print(f"  {model:9s} {steps:5d} steps, by {label:6s} " + " | ".join(parts))
    if args.save:
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(args.out / "ch07_information.csv", rows)
        write_csv(args.out / "ch07_training_curves.csv", [c for res in results for c in res["curves"]])
        write_csv(args.out / "ch07_runs.csv", [res["summary"] for res in results])
        first = min(args.seeds)
        for res in results:
            if res["summary"]["seed"] == first:
                config = {"embed_size": args.embed_size, "num_hiddens": args.num_hiddens, "task": "lists"}
                torch.save({**res["state"], "_config": config},
                           args.out / f"ch07_lists_{res['summary']['model']}.pt")
        print(f"wrote the CSVs and the weights of seed {first} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
