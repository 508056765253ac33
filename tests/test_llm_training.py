"""MDLM training: the loss follows the objective and a few steps lower it on a small batch."""

import random

import torch
from transformers import BertForMaskedLM

from llm import canvas as cv
from llm.data import CleanupPair, asr_style, disfluent_version, load_disfl_qa
from llm.model import quicksilver_config
from llm.tokenizer import train_tokenizer
from llm.train import PackedLayouts, TrainConfig, bucket, collate, mdlm_loss, train


def small_layouts(n: int = 16):
    """A tokenizer trained on the first ``n`` Disfl-QA train pairs, and their cleanup layouts."""
    pairs = load_disfl_qa("train")[:n]
    tok = train_tokenizer([p.disfluent for p in pairs] + [p.fluent for p in pairs], vocab_size=400)
    ids = cv.SpecialIds(tok)
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]
    return tok, ids, enc, pairs, [cv.cleanup_layout(enc(p.disfluent), ids, enc(p.fluent)) for p in pairs]


def small_batch():
    tok, ids, _, _, layouts = small_layouts()
    return tok, ids, collate(layouts, ids.pad)


def test_training_steps_lower_the_loss():
    torch.manual_seed(0)
    tok, ids, batch = small_batch()
    model = BertForMaskedLM(quicksilver_config(len(tok), hidden=64, layers=2, heads=2))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def loss_at(seed):
        return mdlm_loss(model, batch, 1e-3, torch.Generator().manual_seed(seed), ids.mask)

    model.eval()
    with torch.no_grad():
        before = sum(loss_at(s).item() for s in range(4)) / 4
    model.train()
    for step in range(30):
        loss = loss_at(100 + step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        after = sum(loss_at(s).item() for s in range(4)) / 4
    assert after < 0.7 * before


def test_prompt_tokens_never_masked_and_weighting():
    tok, ids, batch = small_batch()
    model = BertForMaskedLM(quicksilver_config(len(tok), hidden=32, layers=1, heads=2))
    seen = {}
    original = model.bert.forward

    def spy(**kwargs):
        seen["input_ids"] = kwargs["input_ids"]
        return original(**kwargs)

    model.bert.forward = spy
    mdlm_loss(model, batch, 1e-3, torch.Generator().manual_seed(0), ids.mask)
    prompt = batch["target"] == -100
    assert torch.equal(seen["input_ids"][prompt], batch["input_ids"][prompt])
    assert (seen["input_ids"][~prompt] == ids.mask).any()


def test_edit_alignment_reproduces_target():
    tok, ids, _ = small_batch()
    for p in load_disfl_qa("train")[:200]:
        src = tok(p.disfluent, add_special_tokens=False)["input_ids"]
        tgt = tok(p.fluent, add_special_tokens=False)["input_ids"]
        edits, inserts = cv.align_edits(src, tgt, ids.keep, ids.delete)
        out = cv.apply_edits(src, edits, inserts, ids.keep, ids.delete)
        if out != tgt:  # only multi-token insertions are lossy: every output token is a target token
            assert set(out) <= set(tgt)


def test_synthetic_disfluencies_keep_the_clean_words():
    rng = random.Random(0)
    clean = "I would like a table for two at 7 pm in San Jose."
    for _ in range(20):
        noisy = disfluent_version(clean, rng, ["book a flight to Boston"])
        words = noisy.split()
        assert len(words) >= len(clean.split())
    assert asr_style("Book 2 tickets, please!", random.Random(1)) in ("book two tickets please", "book 2 tickets please")


def test_word_consistent_decoding_keeps_or_drops_whole_words():
    tok, ids, _ = small_batch()
    src = tok("Agrippina studies", add_special_tokens=False)["input_ids"]
    pieces = tok.convert_ids_to_tokens(src)
    starts = [i == 0 or p.startswith("Ġ") for i, p in enumerate(pieces)]
    assert len(src) > 2 and not all(starts)  # the name is split into sub-word pieces
    # the model kept the first piece of every word but deleted a continuation piece
    canvas = []
    for i, start in enumerate(starts):
        canvas += [ids.keep if start or i % 2 else ids.delete, ids.delete]
    assert cv.decode_cleanup(src, canvas, ids, starts) == src
    # deleting a word's first piece drops the whole word
    canvas[0] = ids.delete
    out = cv.decode_cleanup(src, canvas, ids, starts)
    assert tok.decode(out).split() == ["studies"]


def test_noised_canvas_shows_the_clean_tokens_it_does_not_mask():
    """x_t holds x_0 at unmasked output positions (else the model only ever sees t = 1)."""
    from llm.train import noise_canvas

    tok, ids, batch = small_batch()
    output = batch["target"] != -100
    for t_value, low, high in ((0.1, 0.02, 0.2), (0.5, 0.4, 0.6), (1.0, 1.0, 1.0)):
        t = torch.full((batch["target"].shape[0], 1), t_value)
        x, masked = noise_canvas(batch, t, torch.Generator().manual_seed(0), ids.mask)
        assert torch.equal(masked, x == ids.mask)
        assert not masked[~output].any()
        assert torch.equal(x[output & ~masked], batch["target"][output & ~masked])
        assert torch.equal(x[~output], batch["input_ids"][~output])
        assert low <= masked[output].float().mean().item() <= high


def test_train_on_a_missing_gpu_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    import pytest

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    run = subprocess.run([sys.executable, "-m", "quicksilver", "train", "--device", "cuda", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == "quicksilver train: device 'cuda' requested but torch sees no CUDA device"
    assert not (tmp_path / "x").exists()


def test_packed_layouts_give_the_collated_batch():
    _, ids, enc, pairs, layouts = small_layouts(24)
    layouts += [cv.reply_layout(enc(p.fluent), enc(p.disfluent), ids, enc(p.fluent)) for p in pairs[:5]]
    packed = PackedLayouts(layouts, ids.pad)
    index = bucket(len(packed), 6, random.Random(3), window=2)
    assert len(set(index)) == 6 and all(0 <= i < len(layouts) for i in index)
    got, want = packed.take(index), collate([layouts[i] for i in index], ids.pad)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].dtype == torch.long and torch.equal(got[key], want[key]), key


def test_a_schedule_over_wall_time_needs_minutes(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="needs minutes"):
        train(TrainConfig(out=str(tmp_path / "x"), steps=0, device="cpu", init_from="llm/checkpoint"))


def test_python_m_llm_has_the_lm_commands():
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "llm", "--help"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0
    import re

    listed = re.findall(r"^    (\w+) ", run.stdout, flags=re.M)
    assert listed == ["cleanup", "train", "eval"]
