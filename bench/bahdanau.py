#!/usr/bin/env python3
"""Train the GRU encoder-decoder with and without additive attention on the original
date task (single dates and date ranges, :func:`attention_course.translation.make_dataset`),
each for the same fixed number of optimiser steps on the same batches.

    .venv/bin/python bench/bahdanau.py [--steps 1500] [--seed 0] [--save]

Training is by steps, never by a time budget, so that the result does not depend on
the machine or on its load; one torch thread. For each model it prints the test
exact match overall, for single dates and for ranges, and -- within each of the two
types -- by source length (a type mixes short and long sources, and lumping the two
types together would confound "two dates" with "long").

``--save`` writes ``attention_course/pretrained/ch07_attention.pt`` and
``ch07_baseline.pt`` (float32 state dicts; what
:func:`attention_course.translation.load_pretrained` returns by default) and
``ch07_curves.csv`` (validation exact match every ``--eval-every`` steps). Chapter 7's
lesson itself comes from ``bench/ch07_experiment.py`` (several seeds, the list task).
"""
import argparse
import sys

import torch

from _common import write_csv  # bench/_common.py; puts the repository root on sys.path
from attention_course.translation import (PRETRAINED_DIR, build_model, encode_split,
                                          exact_match, make_dataset, train_model)

CONFIG = {"embed_size": 32, "num_hiddens": 64}
LENGTH_EDGES = {"single": [0, 15, 25, 40], "range": [0, 35, 50, 90]}


def run(attention: bool, data: dict, args) -> tuple:
    torch.manual_seed(args.seed)
    model = build_model(attention=attention, **CONFIG)
    name = "attention" if attention else "baseline"
    print(f"\n{name}: {sum(p.numel() for p in model.parameters())} parameters, {args.steps} steps")
    history = train_model(model, data["train"], val=data["val"], max_steps=args.steps,
                          batch_size=args.batch_size, lr=args.lr, eval_every=args.eval_every,
                          seed=args.seed, progress="bar")
    correct = exact_match(model, data["test"])
    print(f"{name}: final validation exact match {100 * history[-1]['val_acc']:.1f} %, "
          f"test {100 * correct.float().mean():.2f} % ({int(correct.sum())}/{len(correct)})")
    return model, history, correct


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", action="store_true", help="write the weights and the curves")
    args = parser.parse_args()
    torch.set_num_threads(1)
    raw = make_dataset(seed=0)
    data = {name: encode_split(pairs) for name, pairs in raw.items()}
    results = {attention: run(attention, data, args) for attention in (True, False)}

    test = raw["test"]
    lengths = torch.tensor([len(s) for s, _ in test])
    is_range = torch.tensor(["/" in t for _, t in test])
    print("\ntest exact match (attention / baseline) by type and source length")
    for kind, inside in (("single", ~is_range), ("range", is_range)):
        edges = LENGTH_EDGES[kind]
        for low, high in zip(edges[:-1], edges[1:]):
            keep = inside & (lengths >= low) & (lengths < high)
            if keep.any():
                accs = [100 * results[a][2][keep].float().mean().item() for a in (True, False)]
                print(f"  {kind:6s} {low:2d}-{high - 1:2d} characters: {accs[0]:6.1f} % / {accs[1]:6.1f} %"
                      f"   (n = {int(keep.sum())})")

    if args.save:
        PRETRAINED_DIR.mkdir(parents=True, exist_ok=True)
        for attention, (model, history, _) in results.items():
            name = "attention" if attention else "baseline"
            torch.save({**model.state_dict(), "_config": dict(CONFIG)}, PRETRAINED_DIR / f"ch07_{name}.pt")
        write_csv(PRETRAINED_DIR / "ch07_curves.csv",
                  [{"model": "attention" if attention else "baseline", "step": h["step"],
                    "loss": f"{h['loss']:.4f}", "val_acc": f"{h['val_acc']:.4f}"}
                   for attention, (_, history, _) in results.items() for h in history])
        print(f"\nwrote weights and curves to {PRETRAINED_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
