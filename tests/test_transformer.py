"""attention_course.transformer: the claims Chapter 8 makes about its layers and its model.

* the attention layer is Chapter 6's (same parameters, same function for causal self-attention)
  and agrees with ``nn.MultiheadAttention`` for cross-attention with a key padding mask;
* masks: padding, causal, their combination; a query that sees nothing gets zero weights and
  finite gradients;
* the blocks compute the pre-LN and post-LN formulas; the decoder is causal; padding a batch
  does not change the results at the real positions;
* the model works with Chapter 7's training and evaluation functions; greedy decoding encodes
  once and agrees with teacher forcing on its own output; the shipped weights translate;
* the module imports nothing that holds checks or answers (it ships to the grading child);
* ``train_scheduled``'s ``evaluate`` hook (what ``bench/transformer.py --part lists`` records) adds
  its measures without changing the training;
* the shipped list-task and speed tables compare the two models alike (the same steps, batches,
  evaluation steps and grid for both; both models at every length).
"""
import ast
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from attention_course import multihead as mh
from attention_course import transformer as tf
from attention_course import translation as tr

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def test_imports_only_torch_and_runtime_modules():
    tree = ast.parse((ROOT / "attention_course" / "transformer.py").read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            modules.add(("." * node.level) + (node.module or ""))
    assert modules <= {"__future__", "math", "sys", "time", "typing", "weakref", "torch", ".", ".functional",
                       ".translation", "torch.nn"}, modules
    source = (ROOT / "attention_course" / "transformer.py").read_text()
    for forbidden in ("registry", "checking", "exercises"):
        assert f"import {forbidden}" not in source and f".{forbidden}" not in source


def test_attention_layer_is_chapter_6s_layer():
    torch.manual_seed(0)
    ours = tf.MaskedMultiHeadAttention(12, num_heads=3, context_length=8)
    assert isinstance(ours, mh.MultiHeadAttention)
    chapter6 = mh.MultiHeadAttention(12, 12, 8, 0.0, num_heads=3)
    assert ours.state_dict().keys() == chapter6.state_dict().keys()
    chapter6.load_state_dict(ours.state_dict())
    x = torch.randn(2, 7, 12, generator=_gen(1))
    out, weights = ours(x, causal=True, return_weights=True)
    want, want_weights = chapter6(x, return_weights=True)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(weights, want_weights)
    # the same with the causal mask given as a mask
    torch.testing.assert_close(ours(x, mask=tf.causal_mask(7)), want)


def test_cross_attention_agrees_with_nn_multiheadattention():
    torch.manual_seed(0)
    ours = tf.MaskedMultiHeadAttention(8, num_heads=2)
    theirs = nn.MultiheadAttention(8, 2, bias=True, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_query.weight, ours.W_key.weight, ours.W_value.weight]))
        theirs.in_proj_bias.zero_()
        theirs.out_proj.load_state_dict(ours.out_proj.state_dict())
    g = _gen(2)
    x, memory = torch.randn(3, 4, 8, generator=g), torch.randn(3, 6, 8, generator=g)
    pad = tf.padding_mask(torch.tensor([6, 2, 4]), 6)
    out, weights = ours(x, memory, key_padding_mask=pad, return_weights=True)
    want, want_weights = theirs(x, memory, memory, key_padding_mask=pad, average_attn_weights=False)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights, want_weights, rtol=1e-4, atol=1e-5)
    assert weights[1, :, :, 2:].abs().max() == 0


def test_query_without_visible_key_gets_zero_weights_and_finite_gradients():
    torch.manual_seed(0)
    layer = tf.MaskedMultiHeadAttention(4, num_heads=2)
    x = torch.randn(2, 3, 4, generator=_gen(3), requires_grad=True)
    memory = torch.randn(2, 5, 4, generator=_gen(4), requires_grad=True)
    out, weights = layer(x, memory, key_padding_mask=tf.padding_mask(torch.tensor([5, 0]), 5), return_weights=True)
    assert torch.equal(weights[1], torch.zeros_like(weights[1]))
    torch.testing.assert_close(out[1], layer.out_proj.bias.expand(3, -1))
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(memory.grad).all()


def test_masks():
    lens = torch.tensor([3, 1, 0])
    pad = tf.padding_mask(lens, 4)
    assert pad.tolist() == [[False, False, False, True], [False, True, True, True], [True] * 4]
    causal = tf.causal_mask(4)
    assert torch.equal(causal, torch.ones(4, 4, dtype=torch.bool).triu(1))
    combined = tf.decoder_self_mask(lens, 4)
    for b in range(3):
        for i in range(4):
            for j in range(4):
                assert combined[b, i, j].item() == (j > i or j >= lens[b].item())
    with pytest.raises(ValueError, match="lens"):
        tf.padding_mask(torch.tensor([5]), 4)
    with pytest.raises(ValueError, match="key_padding_mask"):
        tf.MaskedMultiHeadAttention(4, 2)(torch.randn(1, 2, 4), key_padding_mask=torch.zeros(1, 3, dtype=torch.bool))


def test_sinusoidal_encoding_is_chapter_4s():
    from attention_course.exercises.ch04.ex3_sinusoidal_encoding import sinusoidal_encoding as chapter4
    torch.testing.assert_close(tf.sinusoidal_encoding(50, 16), chapter4(50, 16))
    table = tf.sinusoidal_encoding(5, 4)
    assert table[3, 2].item() == pytest.approx(math.sin(3 / 100.0), abs=1e-6)
    assert table[3, 3].item() == pytest.approx(math.cos(3 / 100.0), abs=1e-6)


@pytest.mark.parametrize("norm_first", [True, False])
def test_blocks_compute_the_pre_and_post_ln_formulas(norm_first):
    torch.manual_seed(0)
    block = tf.DecoderBlock(8, 2, 16, norm_first=norm_first).eval()
    g = _gen(5)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if p.dim() == 1 and p.shape[0] == 8 else 0.0))
    x, memory = torch.randn(2, 5, 8, generator=g), torch.randn(2, 6, 8, generator=g)
    self_mask = tf.decoder_self_mask(torch.tensor([5, 3]), 5)
    pad = tf.padding_mask(torch.tensor([6, 4]), 6)
    got = block(x, memory, self_mask, pad)

    def sa(h):
        return block.self_attn(h, mask=self_mask)

    def ca(h):
        return block.cross_attn(h, memory, key_padding_mask=pad)

    if norm_first:
        want = x + sa(block.norm1(x))
        want = want + ca(block.norm2(want))
        want = want + block.ffn(block.norm3(want))
    else:
        want = block.norm1(x + sa(x))
        want = block.norm2(want + ca(want))
        want = block.norm3(want + block.ffn(want))
    torch.testing.assert_close(got, want)


def _tiny(seed=0, **kw):
    torch.manual_seed(seed)
    return tf.build_transformer(d_model=16, num_heads=2, num_layers=2, d_ff=32, **kw).eval()


def test_decoder_is_causal_and_padding_does_not_change_real_positions():
    model = _tiny()
    batch = tr.encode_split(tr.make_dataset(num_train=0, num_val=0, num_test=6, seed=3)["test"])
    with torch.no_grad():
        memory = model.encode(batch.src, batch.src_lens)
        logits = model.decode(batch.tgt_in, memory, batch.src_lens)
        changed = batch.tgt_in.clone()
        changed[:, 5:] = 7                                  # later inputs changed
        torch.testing.assert_close(model.decode(changed, memory, batch.src_lens)[:, :5], logits[:, :5])
        # the combined mask changes nothing at the real target positions
        real = batch.tgt_in != tr.Vocab.pad
        with_pad = model.decode(batch.tgt_in, memory, batch.src_lens, tgt_lens=real.sum(1))
        torch.testing.assert_close(with_pad[real], logits[real])
        # extra source padding changes nothing either
        longer = torch.cat([batch.src, torch.zeros(len(batch), 9, dtype=torch.long)], dim=1)
        memory2 = model.encode(longer, batch.src_lens)
        torch.testing.assert_close(model.decode(batch.tgt_in, memory2, batch.src_lens), logits,
                                   rtol=1e-4, atol=1e-5)


def test_greedy_encodes_once_and_matches_teacher_forcing_on_its_output():
    model = tf.build_transformer(d_model=16, num_heads=2, num_layers=2, d_ff=32, max_encodes=1)
    model.eval()
    batch = tr.encode_split(tr.make_dataset(num_train=0, num_val=0, num_test=4, seed=4)["test"])
    tokens, weights = model.greedy(batch.src, batch.src_lens, 7)
    assert tokens.shape == (4, 7) and weights.shape == (4, 7, batch.src.shape[1])
    with pytest.raises(RuntimeError, match="encode was called 2 times"):
        model.encode(batch.src, batch.src_lens)
    model.max_encodes = None
    with torch.no_grad():
        memory = model.encode(batch.src, batch.src_lens)
        prefix = torch.cat([torch.ones(4, 1, dtype=torch.long), tokens[:, :-1]], dim=1)
        logits, cross = model.decode(prefix, memory, batch.src_lens, return_weights=True)
    assert torch.equal(logits.argmax(-1), tokens)
    torch.testing.assert_close(cross[:, -1].mean(dim=1), weights)


def test_works_with_chapter_7s_training_and_a_schedule():
    data = tr.make_dataset(num_train=256, num_val=16, num_test=0, p_range=0.0, seed=5)
    train, val = tr.encode_split(data["train"]), tr.encode_split(data["val"])
    model = _tiny(seed=1).train()
    history = tr.train_model(model, train, val=val, max_steps=20, batch_size=32, lr=3e-3, eval_every=10,
                             progress="none")
    assert history[-1]["step"] == 20 and history[-1]["loss"] < history[0]["loss"]
    first = tf.train_scheduled(_tiny(seed=2).train(), train, val=val, max_steps=30, batch_size=32, eval_every=10)
    again = tf.train_scheduled(_tiny(seed=2).train(), train, val=val, max_steps=30, batch_size=32, eval_every=10)
    assert [h["loss"] for h in first] == [h["loss"] for h in again]           # seeded
    assert first[-1]["loss"] < first[0]["loss"]
    assert first[0]["lr"] == pytest.approx(3e-3 * tf.learning_rate_factor(9 / 30, 9, 100))
    assert tf.learning_rate_factor(1.0, 500, 100) == pytest.approx(0.0, abs=1e-12)
    assert tf.learning_rate_factor(0.0, 49, 100) == pytest.approx(0.5)


def test_shipped_weights_translate():
    path = tr.PRETRAINED_DIR / "ch08_transformer.pt"
    if not path.exists():
        pytest.fail(f"{path} is missing: run bench/transformer.py --save")
    model = tf.load_pretrained_transformer()
    test = tr.encode_split(tr.make_dataset(seed=0)["test"][:300])
    accuracy = tr.exact_match(model, test).float().mean().item()
    assert accuracy >= 0.95, accuracy
    (output, weights), = tr.translate(model, ["3rd of March, 1998"])
    assert output == "1998-03-03" and weights.shape == (11, 18)


def test_the_races_shipped_bahdanau_model_is_the_one_the_race_summary_records():
    """ch08_bahdanau.pt is seed 0 of the race: its test exact match is the race summary's."""
    import csv
    path = tr.PRETRAINED_DIR / "ch08_bahdanau.pt"
    if not path.exists():
        pytest.fail(f"{path} is missing: run bench/transformer.py --part race --race-models bahdanau --seeds 0 --save")
    summary = [r for r in csv.DictReader(open(tr.PRETRAINED_DIR / "ch08_race_summary.csv"))
               if r["seed"] == "0" and r["model"] == "bahdanau"]
    model = tf.load_pretrained_bahdanau()
    assert isinstance(model, tr.Seq2Seq) and not model.training
    test = tr.encode_split(tr.make_dataset(seed=0)["test"])
    accuracy = tr.exact_match(model, test).float().mean().item()
    # the shipped weights are rounded to float16, as the race's reported accuracy already was
    assert accuracy == pytest.approx(float(summary[0]["test_exact_match"]), abs=0.002)


def test_train_scheduled_merges_what_evaluate_returns_at_every_evaluation():
    data = tr.make_dataset(num_train=128, num_val=8, num_test=0, p_range=0.0, seed=6)
    train = tr.encode_split(data["train"])
    calls = []

    def evaluate(model, step):
        calls.append((step, model.training))
        return {"probe": step * 2}

    model = _tiny(seed=3).train()
    history = tf.train_scheduled(model, train, max_steps=25, batch_size=32, eval_every=10, evaluate=evaluate)
    assert [h["step"] for h in history] == [10, 20, 25]
    assert [h["probe"] for h in history] == [20, 40, 50]
    assert [step for step, _ in calls] == [10, 20, 25]
    assert model.training                       # training resumes in training mode after each evaluation
    plain = tf.train_scheduled(_tiny(seed=3).train(), train, max_steps=25, batch_size=32, eval_every=10)
    assert [h["loss"] for h in plain] == [h["loss"] for h in history]    # the hook does not change training
    assert "probe" not in plain[0]


def _shipped_rows(name):
    import csv
    path = tr.PRETRAINED_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run bench/transformer.py --save")
    with open(path) as f:
        return list(csv.DictReader(f))


def test_list_task_runs_evaluate_both_models_alike():
    """Chapter 8's list-task comparison: the same evaluation steps, grid checkpoints, budget and
    batch for both models of every seed that has both (the chapter compares those)."""
    runs, curves, grid = (_shipped_rows(f"ch08_lists_{part}.csv") for part in ("runs", "curves", "grid"))
    seeds = {r["seed"] for r in runs if r["model"] == "transformer"} & {r["seed"] for r in runs if r["model"] == "bahdanau"}
    assert seeds, "no seed with runs of both models"
    for seed in seeds:
        mine = {m: [r for r in runs if r["seed"] == seed and r["model"] == m] for m in ("transformer", "bahdanau")}
        assert {(r["steps"], r["batch_size"]) for r in mine["transformer"]} == \
               {(r["steps"], r["batch_size"]) for r in mine["bahdanau"]}
        steps = {m: [r["step"] for r in curves if r["seed"] == seed and r["model"] == m] for m in mine}
        assert steps["transformer"] == steps["bahdanau"] and len(steps["transformer"]) >= 5
        cells = {m: sorted((r["step"], r["n_dates"], r["filler"]) for r in grid if r["seed"] == seed and r["model"] == m)
                 for m in mine}
        assert cells["transformer"] == cells["bahdanau"] and len(cells["transformer"]) >= 16


def test_speed_table_times_both_models_at_every_length():
    rows = _shipped_rows("ch08_speed.csv")
    assert len(rows) >= 4 and [int(r["length"]) for r in rows] == sorted(int(r["length"]) for r in rows)
    for r in rows:
        ratio = float(r["bahdanau_seconds"]) / float(r["transformer_seconds"])
        assert ratio == pytest.approx(float(r["ratio_bahdanau_over_transformer"]), abs=2e-3)
        for model in ("transformer", "bahdanau"):
            tokens = 2 * int(r["batch_size"]) * int(r["length"]) / float(r[f"{model}_seconds"])
            assert tokens == pytest.approx(int(r[f"{model}_tokens_per_second"]), rel=1e-3)


def test_train_scheduled_label_smoothing_reaches_the_loss():
    """With label smoothing 1 the target is uniform over the vocabulary, and no model can get the
    cross-entropy against a uniform target below log(V); without smoothing the same training goes
    below it. (A smoothing that never reached the loss would leave both runs equal.)"""
    data = tr.make_dataset(num_train=256, num_val=0, num_test=0, p_range=0.0, seed=6)
    train = tr.encode_split(data["train"])
    floor = math.log(len(tr.TARGET_VOCAB))
    runs = {eps: tf.train_scheduled(_tiny(seed=3).train(), train, max_steps=60, batch_size=32, lr=1e-2,
                                    eval_every=20, label_smoothing=eps) for eps in (0.0, 1.0)}
    assert all(h["loss"] >= floor - 1e-4 for h in runs[1.0]), (floor, runs[1.0])
    assert runs[0.0][-1]["loss"] < floor - 0.3, (floor, runs[0.0])
    default = tf.train_scheduled(_tiny(seed=3).train(), train, max_steps=60, batch_size=32, lr=1e-2, eval_every=20)
    assert [h["loss"] for h in default] == [h["loss"] for h in runs[0.0]]          # 0.0 is the default


def test_search_gives_both_models_the_same_grid_and_budget():
    rows = _shipped_rows("ch08_search.csv")
    grids = {m: {(r["seed"], r["batch_size"], r["lr"]) for r in rows if r["model"] == m} for m in ("transformer", "bahdanau")}
    assert grids["transformer"] == grids["bahdanau"] and len(grids["transformer"]) >= 6
    for model in grids:
        for seed, batch_size, lr in grids[model]:
            run = [r for r in rows if (r["model"], r["seed"], r["batch_size"], r["lr"]) == (model, seed, batch_size, lr)]
            assert [int(r["pairs"]) for r in run] == [25600, 51200, 76800, 102400], (model, batch_size, lr)
            assert all(int(r["pairs"]) == int(r["step"]) * int(batch_size) for r in run)


def test_recipe_runs_every_variant_on_the_race_budget_of_the_same_seeds():
    rows = _shipped_rows("ch08_recipe.csv")
    variants = {(r["variant"], r["dropout"], r["label_smoothing"]) for r in rows}
    assert {(float(d), float(s)) for _, d, s in variants} == {(0.0, 0.0), (0.1, 0.0), (0.0, 0.1), (0.1, 0.1)}
    race = {r["step"] for r in _shipped_rows("ch08_race.csv") if r["model"] == "transformer" and r["seed"] == "0"}
    for variant, _, _ in variants:
        seeds = {r["seed"] for r in rows if r["variant"] == variant}
        assert seeds == {r["seed"] for r in rows}, variant          # every variant on the same seeds
        for seed in seeds:
            run = [r for r in rows if r["variant"] == variant and r["seed"] == seed]
            assert {r["step"] for r in run} == race and run[-1]["test_exact_match"] != "", (variant, seed)


def test_longer_list_run_is_the_transformer_of_seed_0_over_twice_the_steps():
    runs, curves, grid = (_shipped_rows(f"ch08_lists_long_{part}.csv") for part in ("runs", "curves", "grid"))
    assert [(r["seed"], r["model"], r["steps"], r["batch_size"]) for r in runs] == [("0", "transformer", "4800", "64")]
    short = _shipped_rows("ch08_lists_runs.csv")
    assert any((r["seed"], r["model"], r["lr"]) == ("0", "transformer", runs[0]["lr"]) for r in short)
    assert [int(r["step"]) for r in curves] == list(range(200, 4801, 200))
    assert sorted({int(r["step"]) for r in grid}) == [1600, 3200, 4800] and len(grid) == 3 * 16
