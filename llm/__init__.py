"""The diffusion language model: model loading, sampler, tasks, backends and training.

``llm`` knows nothing of audio. The voice pipeline and the server reach it only
through :class:`llm.backend.LanguageModel`, created with :func:`load_backend`.
"""

from llm.backend import LanguageModel, LanguageModelError, Turn, load_backend
from llm.effort import REASONING_EFFORTS

__all__ = ["LanguageModel", "LanguageModelError", "Turn", "load_backend", "REASONING_EFFORTS"]
