"""Sampler invariants on a tiny random model: the prompt is never changed, no mask is
left, and each reasoning effort costs the documented number of forward passes."""

import pytest
import torch
from transformers import BertForMaskedLM

from llm.effort import sampler_settings
from llm.sampler import denoising_steps, generate, num_transfer_tokens

MASK = 1


class CountingModel(torch.nn.Module):
    """Wraps a model and counts forward passes."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, **kwargs):
        self.calls += 1
        return self.inner(**kwargs)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return CountingModel(BertForMaskedLM.from_pretrained(tiny_model_dir).eval())


@pytest.fixture
def prompt():
    return torch.randint(12, 200, (2, 7), generator=torch.Generator().manual_seed(3))


def run(model, prompt, gen_length, effort):
    s = sampler_settings(effort)
    model.calls = 0
    x, passes = generate(model, prompt, gen_length, MASK, steps=s.steps, block_length=s.block_length,
                         threshold=s.threshold, remasking=s.remasking)
    return x, passes


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_prompt_unchanged_and_no_mask_left(model, prompt, effort):
    x, _ = run(model, prompt, 40, effort)
    assert x.shape == (2, 47)
    assert torch.equal(x[:, :7], prompt)
    assert not (x[:, 7:] == MASK).any()


def test_effort_sets_forward_passes(model, prompt):
    _, low = run(model, prompt, 40, "low")
    assert low == 1 and model.calls == 1
    _, high = run(model, prompt, 40, "high")
    assert high == 40 and model.calls == 40
    _, medium = run(model, prompt, 40, "medium")
    # threshold decoding: at least one pass per block of 32, at most one per token
    assert 2 <= medium <= 40 and model.calls == medium


def test_steps_spread_over_blocks(model, prompt):
    model.calls = 0
    x, passes = generate(model, prompt, 32, MASK, steps=8, block_length=8)
    assert passes == 8  # 4 blocks x 2 steps
    assert not (x[:, 7:] == MASK).any()


def test_blocks_fill_left_to_right(model, prompt):
    seen = []
    for x, _ in denoising_steps(model, prompt, 16, MASK, steps=4, block_length=8):
        seen.append((x[:, 7:] == MASK).clone())
    # after the first block's steps, the second block is still fully masked
    assert not seen[1][:, :8].any() and seen[1][:, 8:].all()
    assert not seen[-1].any()


def test_random_remasking_and_temperature(model, prompt):
    g = torch.Generator().manual_seed(0)
    x1, _ = generate(model, prompt, 12, MASK, steps=4, remasking="random", temperature=1.0, generator=g)
    g = torch.Generator().manual_seed(0)
    x2, _ = generate(model, prompt, 12, MASK, steps=4, remasking="random", temperature=1.0, generator=g)
    assert torch.equal(x1, x2)
    assert not (x1[:, 7:] == MASK).any()


def test_suppressed_ids_never_predicted(model, prompt):
    x, _ = generate(model, prompt, 30, MASK, steps=1, suppress_ids=list(range(0, 150)))
    assert (x[:, 7:] >= 150).all()


def test_given_canvas_positions_are_kept(model, prompt):
    canvas = torch.full((2, 10), MASK)
    canvas[:, 0] = 5
    x, _ = generate(model, prompt, 10, MASK, steps=1, canvas=canvas)
    assert (x[:, 7] == 5).all()


def test_callback_sees_every_step_and_can_stop(model, prompt):
    steps = []
    x, passes = generate(model, prompt, 20, MASK, steps=20, callback=lambda i, x: steps.append(i) or i < 3)
    assert steps == [1, 2, 3]
    assert passes == 4  # three steps, then one pass fills the rest
    assert not (x[:, 7:] == MASK).any()


def test_num_transfer_tokens_sums_to_mask_count():
    masked = torch.tensor([[True] * 10 + [False] * 2, [True] * 3 + [False] * 9])
    plan = num_transfer_tokens(masked, 4)
    assert plan.tolist() == [[3, 3, 2, 2], [1, 1, 1, 0]]


@pytest.mark.parametrize("kwargs, message", [
    ({"remasking": "top_k"}, "remasking"),
    ({"threshold": 1.5}, "threshold"),
    ({"steps": 0}, "steps"),
])
def test_bad_arguments_raise(model, prompt, kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(model, prompt, 8, MASK, **kwargs)


def test_unknown_effort_raises():
    with pytest.raises(ValueError, match="reasoning_effort"):
        sampler_settings("extreme")


def test_block_length_applies_to_medium_and_high_only():
    assert sampler_settings("high", block_length=8).block_length == 8
    assert sampler_settings("medium", block_length=8).threshold == 0.9
    assert sampler_settings("medium", block_length=8).block_length == 8
    assert sampler_settings("medium").block_length == 32
    assert sampler_settings("low", block_length=8).block_length is None  # one pass, one block


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
@pytest.mark.parametrize("quantized", [False, True])
def test_vocab_ids_equal_banning_every_other_id(tiny_model_dir, prompt, effort, quantized):
    """Candidate ids (the projection onto those decoder rows only) decode exactly as the full
    vocabulary with every other id banned: on a BertForMaskedLM (own head path, float and
    dynamic-int8) and through the generic ``.logits`` path of any other model."""
    from llm.model import quantize_int8
    bert = BertForMaskedLM.from_pretrained(tiny_model_dir).eval()
    if quantized:
        bert = quantize_int8(bert)
    s = sampler_settings(effort)
    candidates = torch.arange(20, 140, 3)
    others = sorted(set(range(bert.config.vocab_size)) - set(candidates.tolist()))
    kwargs = dict(steps=s.steps, block_length=s.block_length, threshold=s.threshold, remasking=s.remasking)
    for m in (bert, CountingModel(bert)):
        full, _ = generate(m, prompt, 10, MASK, suppress_ids=others, **kwargs)
        restricted, _ = generate(m, prompt, 10, MASK, vocab_ids=candidates, **kwargs)
        assert torch.equal(full, restricted) or quantized  # int8: the restricted head runs in float
        assert set(restricted[:, 7:].flatten().tolist()) <= set(candidates.tolist())
        assert torch.equal(restricted[:, :7], prompt)
