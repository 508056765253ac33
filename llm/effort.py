"""``reasoning_effort`` names and their exact sampler settings.

The mapping (documented in README.md):

======== ======================================================================
effort   sampler settings
======== ======================================================================
low      one forward pass: every mask filled at once (``steps=1``, one block)
medium   Fast-dLLM confidence-threshold decoding: ``threshold=0.9``, blocks of
         32 positions, every position above 0.9 committed, at least one per step
high     one token per step (``steps = gen_length``), low-confidence remasking,
         blocks of 32 decoded left to right
======== ======================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

REASONING_EFFORTS = ("low", "medium", "high")


@dataclass(frozen=True)
class SamplerSettings:
    """Arguments of :func:`llm.sampler.generate` chosen by a reasoning effort.

    ``steps`` is ``None`` where it equals the generation length.
    """

    steps: int | None
    block_length: int | None
    threshold: float | None
    remasking: str = "low_confidence"


def sampler_settings(reasoning_effort: str) -> SamplerSettings:
    """Return the sampler settings for ``reasoning_effort``.

    Raises:
        ValueError: ``reasoning_effort`` is not one of ``low``, ``medium``, ``high``.
    """
    if reasoning_effort == "low":
        return SamplerSettings(steps=1, block_length=None, threshold=None)
    if reasoning_effort == "medium":
        return SamplerSettings(steps=None, block_length=32, threshold=0.9)
    if reasoning_effort == "high":
        return SamplerSettings(steps=None, block_length=32, threshold=None)
    raise ValueError(
        f"unknown reasoning_effort {reasoning_effort!r}; expected one of {', '.join(REASONING_EFFORTS)}"
    )
