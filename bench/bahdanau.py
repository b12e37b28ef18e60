#!/usr/bin/env python3
"""Chapter 7 benchmark: train the GRU encoder-decoder with and without additive
attention on the course's date task, each for the same time budget, on the CPU.

    .venv/bin/python bench/bahdanau.py [--seconds 60] [--threads 2] [--save]

For each model it prints a progress bar, the training time until the validation
exact-match accuracy first reached the target (95 %), and the final exact-match
accuracy on the held-out test set, overall and by source length. Training time
excludes the evaluations (about 0.3 s each).

``--save`` writes what Chapter 7 loads (so the notebook never trains for long):
``attention_course/pretrained/ch07_attention.pt`` and ``ch07_baseline.pt`` (state
dicts in float16, a little over 100 KB each; the accuracies printed are those of the
saved, rounded weights), ``ch07_curves.csv`` (validation accuracy against training
time) and ``ch07_by_length.csv`` (test accuracy by source length).

Timings depend on the machine and on what else runs on it; the numbers quoted in
the chapter say when and on what they were measured.
"""
import argparse
import csv
import datetime
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attention_course.translation import (PRETRAINED_DIR, accuracy_by_length, build_model,  # noqa: E402
                                          encode_split, exact_match, make_dataset, train_model)

LENGTH_EDGES = [0, 15, 25, 35, 45, 55, 90]
CONFIG = {"embed_size": 32, "num_hiddens": 64}


def run(attention: bool, data: dict, seconds: float, target: float, seed: int) -> tuple:
    torch.manual_seed(seed)
    model = build_model(attention=attention, **CONFIG)
    name = "attention" if attention else "baseline (no attention)"
    print(f"\n{name}: {sum(p.numel() for p in model.parameters())} parameters, budget {seconds:.0f} s")
    history = train_model(model, data["train"], val=data["val"], max_seconds=seconds,
                          batch_size=128, lr=1e-2, eval_every=50, target=target, seed=seed,
                          progress="bar")
    # Round-trip through float16 exactly as saved, so the reported accuracy is the shipped model's.
    state = {k: v.half() for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.float() for k, v in state.items()})
    correct = exact_match(model, data["test"])
    reached = next((h for h in history if h["val_acc"] is not None and h["val_acc"] >= target), None)
    steps = history[-1]["step"]
    print(f"{name}: {steps} steps in {history[-1]['seconds']:.1f} s of training")
    if reached:
        print(f"{name}: time to {100 * target:.0f} % validation exact match: {reached['seconds']:.1f} s "
              f"(step {reached['step']})")
    else:
        print(f"{name}: did not reach {100 * target:.0f} % validation exact match within {seconds:.0f} s "
              f"(best {100 * max(h['val_acc'] for h in history):.1f} %)")
    print(f"{name}: final test exact match {100 * correct.float().mean():.2f} % "
          f"({int(correct.sum())}/{len(correct)})")
    return model, state, history, correct


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="training time budget per model")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", action="store_true",
                        help="write the weights and curves that Chapter 7 loads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {os.cpu_count()} cores, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.1f} (other programs slow training down)")
    raw = make_dataset(seed=args.seed)
    data = {name: encode_split(pairs) for name, pairs in raw.items()}
    print("data: " + ", ".join(f"{name} {len(split)}" for name, split in data.items())
          + f"; source lengths {int(data['test'].src_lens.min())}-{int(data['test'].src_lens.max())} characters")

    results = {attention: run(attention, data, args.seconds, args.target, args.seed)
               for attention in (True, False)}

    lengths = data["test"].src_lens
    print(f"\ntest exact match by source length ({'attention':>9s} / baseline, number of examples)")
    by_length = {}
    for attention, (_, _, _, correct) in results.items():
        by_length[attention] = accuracy_by_length(correct, lengths, LENGTH_EDGES)
    for k, (low, high) in enumerate(zip(LENGTH_EDGES[:-1], LENGTH_EDGES[1:])):
        print(f"  {low:2d}-{high - 1:2d} characters: {100 * by_length[True][1][k]:6.1f} % / "
              f"{100 * by_length[False][1][k]:6.1f} %   (n = {int(by_length[True][2][k])})")

    if args.save:
        PRETRAINED_DIR.mkdir(parents=True, exist_ok=True)
        for attention, (_, state, history, _) in results.items():
            name = "attention" if attention else "baseline"
            torch.save({**state, "_config": dict(CONFIG)}, PRETRAINED_DIR / f"ch07_{name}.pt")
        today = datetime.date.today().isoformat()
        with open(PRETRAINED_DIR / "ch07_curves.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["model", "step", "seconds", "loss", "val_acc"])
            for attention, (_, _, history, _) in results.items():
                for h in history:
                    writer.writerow(["attention" if attention else "baseline", h["step"],
                                     f"{h['seconds']:.2f}", f"{h['loss']:.4f}", f"{h['val_acc']:.4f}"])
        with open(PRETRAINED_DIR / "ch07_by_length.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["low", "high", "count", "attention_acc", "baseline_acc"])
            for k, (low, high) in enumerate(zip(LENGTH_EDGES[:-1], LENGTH_EDGES[1:])):
                writer.writerow([low, high - 1, int(by_length[True][2][k]),
                                 f"{by_length[True][1][k]:.4f}", f"{by_length[False][1][k]:.4f}"])
        with open(PRETRAINED_DIR / "ch07_measured.txt", "w") as f:
            f.write(f"measured {today}: {os.cpu_count()} cores, torch threads {args.threads}, "
                    f"budget {args.seconds:.0f} s per model, load average at start "
                    f"{os.getloadavg()[0]:.1f}\n")
        print(f"\nwrote weights and curves to {PRETRAINED_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
